// Command bitd is bitgo's daemon: it owns packed low-bit weights and runs linear layers
// for host frameworks (vLLM, PyTorch) over a shared-memory channel.
//
//	bitd serve   run the service (unix socket + shared memory, /metrics)
//	bitd pack    convert a checkpoint to a .bitgo pack file
//	bitd repack  rewrite a pack file of an older blob layout in this bitd's
//	bitd bench   measure bandwidth and the kernels on real model shapes
//	bitd info    CPU features, core types, kernels, OpenCL devices
//	bitd tune    autotune GPU kernels for a device
//
// Each subcommand lives in its own file and registers itself in init().
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
)

// command is one subcommand: run gets the arguments after the subcommand's name and
// returns the process exit code.
type command struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

var commands = map[string]command{}

func register(c command) { commands[c.name] = c }

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: bitd <command> [flags]")
	fmt.Fprintln(w, "\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-8s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'bitd <command> -h' for a command's flags.")
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "bitd: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	return c.run(args[1:], stdout, stderr)
}

// parseFlags parses a command's flags and rejects arguments left after them (none of info,
// selfcheck, tune and bench takes any: a value typed without its flag must not be dropped
// silently), printing why to stderr; false means exit 2.
func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) bool {
	if err := fs.Parse(args); err != nil {
		return false // fs printed it
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "bitd %s: unexpected argument %q (flags only; see bitd %s -h)\n", fs.Name(), fs.Arg(0), fs.Name())
		return false
	}
	return true
}

// parseInterspersed parses args with fs, flags before and after positional arguments
// alike, and returns the positional arguments in order.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			return pos, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		rest = fs.Args()[1:]
	}
}

// exitForParse is a command's exit code for a flag parsing error: 0 for -h, else 2 (the
// FlagSet has printed the error and the usage).
func exitForParse(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}

// usageFlagSet is a command's FlagSet that reports to stderr, its usage the text usage
// followed by the flags.
func usageFlagSet(name, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	return fs
}
