// Package notmain is not a program.
package notmain
