#!/usr/bin/env bash
# The test command (README, .ci/run): formatting, vet, a static CGO_ENABLED=0
# build, the race detector over the short suite, then the full suite (the
# multi-process collective matrix with counts up to 1000003), printed as plain
# go test prints it (an ok/FAIL line per package, the output of failed tests)
# and followed by the list of tests that skipped, with their reasons.
set -euo pipefail
cd "$(dirname "$0")/.."
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then echo "gofmt needed:"; echo "$unformatted"; exit 1; fi
go vet ./...
CGO_ENABLED=0 go build -o /dev/null ./cmd/goccl
go test -race -short -timeout 15m ./...
tools=$(mktemp -d)
trap 'rm -rf "$tools"' EXIT
go build -o "$tools/testsummary" ./scripts/testsummary
# pipefail: the script fails when go test does, after the summary.
go test -json -timeout 20m ./... | "$tools/testsummary"
