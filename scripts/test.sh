#!/usr/bin/env bash
# The test command (README, .ci/run): formatting, vet, a static CGO_ENABLED=0
# build, the race detector over the short suite, then the full suite (the
# multi-process collective matrix with counts up to 1000003).
set -euo pipefail
cd "$(dirname "$0")/.."
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then echo "gofmt needed:"; echo "$unformatted"; exit 1; fi
go vet ./...
CGO_ENABLED=0 go build -o /dev/null ./cmd/goccl
go test -race -short -timeout 15m ./...
go test -timeout 20m ./...
