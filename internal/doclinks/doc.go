// Package doclinks holds only a test: every relative link and #anchor in
// the repository's Markdown (README.md, CONTRIBUTING.md, CHANGELOG.md,
// docs/*.md) must name a file and a heading that exist.
package doclinks
