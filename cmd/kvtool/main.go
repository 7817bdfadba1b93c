// Command kvtool inspects kvbuf files.
//
// Usage:
//
//	kvtool <command> [flags] [args]
//
// Commands:
//
//	inspect   describe a bitslice file
//
// Run "kvtool <command> -h" for a command's flags. Exit status: 0 ok,
// 1 error (one line on stderr), 2 usage error.
package main

import (
	"fmt"
	"io"
	"os"
	"strings"
)

// Exit statuses shared by every command.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// command is one kvtool subcommand. Each lives in its own file and returns
// an exit status; none calls os.Exit, so tests can run them in-process.
type command struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

// commands lists the subcommands in the order help shows them.
func commands() []command {
	return []command{
		{"inspect", "describe a bitslice file", runInspect},
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches args to a command and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "kvtool: no command given (run 'kvtool -h' for the list)")
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return exitOK
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "kvtool: unknown command %q (run 'kvtool -h' for the list)\n", args[0])
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: kvtool <command> [flags] [args]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'kvtool <command> -h' for a command's flags.")
	fmt.Fprintln(w, "Exit status: 0 ok, 1 error, 2 usage error.")
}

// fail prints err as one line on stderr, prefixed with the command, and
// returns exitError.
func fail(stderr io.Writer, cmd string, err error) int {
	fmt.Fprintf(stderr, "kvtool %s: %s\n", cmd, oneLine(err.Error()))
	return exitError
}

// usageError prints a one-line usage complaint and returns exitUsage.
func usageError(stderr io.Writer, cmd, msg string) int {
	fmt.Fprintf(stderr, "kvtool %s: %s (run 'kvtool %s -h')\n", cmd, oneLine(msg), cmd)
	return exitUsage
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
