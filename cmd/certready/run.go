package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/pflag"
)

// exitError ends a command other than in success: its exit status, and
// what went wrong (nil when the command's output already said it, as
// status's exit 1 for "some node is not ready").
type exitError struct {
	code  int
	err   error
	usage bool // the command line or its environment is wrong: reportError names --help
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// usageError is a mistake in the command line or its environment (a flag,
// an argument, a CERTREADY_ variable): exit 2.
func usageError(err error) error { return &exitError{code: 2, err: err, usage: true} }

// exitWith ends a command with code; err, when not nil, is printed.
func exitWith(code int, err error) error { return &exitError{code: code, err: err} }

// runFailed is how an error of a command's Run ends it: exit 2, unless it
// chose its own status (exitWith). Never a usage error: the command line
// was accepted.
func runFailed(err error) error {
	if err == nil || isExitError(err) {
		return err
	}
	return exitWith(2, err)
}

func isExitError(err error) bool {
	var e *exitError
	return errors.As(err, &e)
}

// reportError is the one way every command of both builds reports how it
// ended: nothing for success, else "certready <command>: <error>" on w
// (control characters escaped: errors quote flag values, files and
// objects of the cluster), naming --help for a usage error. It returns the
// exit status: an exitError's code, else 2.
func reportError(w io.Writer, command string, err error) int {
	if err == nil {
		return 0
	}
	var e *exitError
	errors.As(runFailed(err), &e)
	if e.err != nil {
		fmt.Fprintf(w, "%s: %s\n", command, escapeError(e.err.Error()))
		if e.usage {
			fmt.Fprintf(w, "Run '%s --help' for usage.\n", command)
		}
	}
	return e.code
}

// process is a command the manifests run (agent, approver, check,
// copy-binary) and version: options filled from its flags, each flag also
// from its CERTREADY_ variable, then completed, validated and run, as the
// operator commands are. The same in both builds.
type process interface {
	// AddFlags binds the options to their flags.
	AddFlags(fs *pflag.FlagSet)
	// Complete derives what the flags imply; set says what the
	// environment filled in.
	Complete(set *envFill) error
	// Validate refuses options that cannot run, before anything is
	// started.
	Validate() error
	// Run runs the process until ctx ends or it fails.
	Run(ctx context.Context) error
}

// failureReporter is a process that reports its own failures: check, whose
// caller (node-problem-detector) reads one line on standard output and its
// exit codes. It returns the exit status.
type failureReporter interface {
	ReportFailure(err error) int
}

// command is one entry of the command table both builds dispatch from.
type command struct {
	name    string
	summary string // one line, for the command list
	long    string // --help's description
	options func() process
}

// runProcess parses args into c's options (the command line first, then
// each flag's CERTREADY_ variable) and runs them. --help prints c's flags
// to stdout.
func runProcess(ctx context.Context, c command, args []string) error {
	o := c.options()
	fs := newFlagSet(c.name)
	o.AddFlags(fs)
	set, err := parse(fs, args, os.LookupEnv)
	if errors.Is(err, pflag.ErrHelp) {
		printProcessHelp(os.Stdout, c, fs)
		return nil
	}
	if err == nil {
		err = o.Complete(set)
	}
	if err == nil {
		err = o.Validate()
	}
	if err != nil {
		err = usageError(err)
	} else {
		err = runFailed(o.Run(ctx))
	}
	// err is an exitError here (usageError, runFailed); one without an
	// error is an ending the command already reported.
	var e *exitError
	if r, ok := o.(failureReporter); ok && errors.As(err, &e) && e.err != nil {
		return exitWith(r.ReportFailure(err), nil)
	}
	return err
}

// printProcessHelp is a process's --help: its description and its flags,
// each with its CERTREADY_ variable unless command line only.
func printProcessHelp(w io.Writer, c command, fs *pflag.FlagSet) {
	fs.VisitAll(func(f *pflag.Flag) {
		if _, only := commandLineOnly[f.Name]; only {
			f.Usage += commandLineOnlyNote
		}
	})
	fmt.Fprintf(w, "Usage: certready %s [flags]\n\n%s\n\nFlags (each can also be set as %s<FLAG>, e.g. --node-name as %s, unless marked command line only):\n%s",
		c.name, c.long, EnvPrefix, EnvName("node-name"), fs.FlagUsages())
}
