// Command kvtool inspects, flushes, fills and benchmarks kvbuf engines.
//
// Usage:
//
//	kvtool <command> [flags] [args]
//
// Commands:
//
//	inspect   describe a bitslice file or an engine directory
//	flush     flush an engine's pending state and pebble memtables
//	load      fill an engine with random changes
//	checkpoint  write a consistent copy of an engine
//	watch     print the changes an engine retained for its change feed
//	bench     run workloads W1-W4, W6-W8, W10 and W11 against their baselines
//	ycsb      run YCSB workloads A-F on kvbuf, pebble, badger and bbolt
//
// Run "kvtool <command> -h" for a command's flags. Flags may come before or
// after the arguments. Exit status: 0 ok, 1 error (one line on stderr),
// 2 usage error.
//
// # Caveats
//
//   - inspect, flush and checkpoint read an engine directory's layout (manifest, store,
//     bitslice files) directly; they follow the format of the kvbuf version
//     they were built with.
//   - inspect holds a shared lock on the engine directory while it reads,
//     so an engine opening the directory at that moment gets ErrLocked.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
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
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

// commands lists the subcommands in the order help shows them.
func commands() []command {
	return []command{
		{"inspect", "describe a bitslice file or an engine directory", runInspect},
		{"flush", "flush an engine's pending state and pebble memtables", runFlush},
		{"load", "fill an engine with random changes", runLoad},
		{"checkpoint", "write a consistent copy of an engine into a new directory", runCheckpoint},
		{"watch", "print the changes an engine retained for its change feed", runWatch},
		{"bench", "run workloads W1-W4, W6-W8, W10 and W11 against their baselines", runBench},
		{"ycsb", "run YCSB workloads A-F on kvbuf, pebble, badger and bbolt", runYCSB},
	}
}

func main() {
	// SIGINT or SIGTERM cancels the context: commands stop between steps
	// and clean up (bench prints the rows it finished and removes its
	// temporary engines) before exiting.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := runContext(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches args to a command and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	return runContext(context.Background(), args, stdout, stderr)
}

// runContext is run with a context that interrupts long commands.
func runContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
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
			return c.run(ctx, args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "kvtool: unknown command %q (run 'kvtool -h' for the list)\n", args[0])
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprint(w, `Usage: kvtool <command> [flags] [args]

Commands:
`)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
Run 'kvtool <command> -h' for a command's flags.
Exit status: 0 ok, 1 error, 2 usage error.
`)
}

// fail prints err as one line on stderr, prefixed with the command, and
// returns exitError. The line carries one prefix, kvtool's: the engine's
// "kvbuf: " is dropped wherever an engine error's text starts (at the
// front, or after kvtool's own context: ": kvbuf: ").
func fail(stderr io.Writer, cmd string, err error) int {
	fmt.Fprintf(stderr, "kvtool %s: %s\n", cmd, errText(err))
	return exitError
}

// errText is err's text in one line, without the engine's prefix.
func errText(err error) string {
	s := strings.ReplaceAll(err.Error(), ": "+kvbufPrefix, ": ")
	return oneLine(strings.TrimPrefix(s, kvbufPrefix))
}

// kvbufPrefix starts every engine error's text.
const kvbufPrefix = "kvbuf: "

// usageError prints a one-line usage complaint and returns exitUsage.
func usageError(stderr io.Writer, cmd, msg string) int {
	fmt.Fprintf(stderr, "kvtool %s: %s (run 'kvtool %s -h')\n", cmd, oneLine(msg), cmd)
	return exitUsage
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// parseFlags parses args with fs, allowing flags before and after the
// positional arguments (which it returns). -h prints help to stdout.
// done is true when the caller should return code at once.
func parseFlags(fs *flag.FlagSet, args []string, help func(io.Writer), stdout, stderr io.Writer) (pos []string, code int, done bool) {
	fs.SetOutput(io.Discard)
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				help(stdout)
				return nil, exitOK, true
			}
			return nil, usageError(stderr, fs.Name(), err.Error()), true
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, exitOK, false
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// parseFlagsN is parseFlags for a command that takes n positional
// arguments: another count is a usage error, wrong (a format of the count)
// saying what the command wants.
func parseFlagsN(fs *flag.FlagSet, args []string, n int, wrong string, help func(io.Writer), stdout, stderr io.Writer) (pos []string, code int, done bool) {
	pos, code, done = parseFlags(fs, args, help, stdout, stderr)
	if !done && len(pos) != n {
		return nil, usageError(stderr, fs.Name(), fmt.Sprintf(wrong, len(pos))), true
	}
	return pos, code, done
}

// printFlags writes fs's flags (except hidden ones) in the help format.
func printFlags(w io.Writer, fs *flag.FlagSet, hidden ...string) {
	fmt.Fprintln(w, "Flags:")
	fs.VisitAll(func(f *flag.Flag) {
		for _, h := range hidden {
			if f.Name == h {
				return
			}
		}
		name, usage := flag.UnquoteUsage(f)
		arg := "--" + f.Name
		if name != "" {
			arg += " " + name
		}
		def := ""
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" {
			def = fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(w, "  %-22s %s%s\n", arg, usage, def)
	})
}
