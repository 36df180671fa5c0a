module github.com/goccl/goccl

go 1.26.0

require github.com/x448/float16 v0.8.4

require golang.org/x/sys v0.49.0

require (
	github.com/google/gopacket v1.1.19
	golang.org/x/net v0.50.0
)

require gonum.org/v1/gonum v0.17.0
