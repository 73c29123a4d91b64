// Command loadtest is the thin command-line front of package loadtest: it
// parses flags into a loadtest.Config (or SweepConfig for the sweep
// subcommand), loads payload files, draws a progress bar on a terminal, and
// writes the text summary to stdout and the JSON/HTML reports to files. All
// measuring lives in the library; like it, this command imports no server
// package of the repository. Run "loadtest -h" for the flags and examples.
package main
