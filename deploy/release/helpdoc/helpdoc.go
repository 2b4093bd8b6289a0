// Package helpdoc reads a snip-jobs binary's own help (`snip-jobs help`, then
// `snip-jobs COMMAND --help` for each command it lists) and renders it as a
// man page (roff) and a bash completion script, so that the commands are
// documented in one place, the binary, and the package's copies follow it.
//
// What is guaranteed: every command `help` lists is read, with its usage line,
// its description and every flag its --help prints; Read fails, naming the
// command, on help it cannot parse rather than leaving something out. What is
// NOT: any understanding of the text beyond paragraphs, indented blocks and
// the flag package's listing (Go's flag.PrintDefaults format).
//
// A build tool: the snip-jobs binary must not import it.
package helpdoc

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// Doc is the whole help of a binary.
type Doc struct {
	Intro    []string // the paragraphs before "Usage:"
	Usage    string   // "snip-jobs COMMAND [flags] [arguments]"
	Commands []Command
	Outro    []string // the paragraphs after the command list
}

// Command is one command's help.
type Command struct {
	Name, Summary string
	Usage         string   // "snip-jobs status [flags]"
	Args          string   // what follows "[flags]" in Usage: "JOB", "show|rebuild"
	About         []string // paragraphs; an indented block is one paragraph, its lines kept
	Flags         []Flag
}

// Flag is one flag as --help lists it.
type Flag struct {
	Name string // without dashes
	Arg  string // its value's name ("string", "duration"); "" for a boolean
	Text string
}

// Read runs bin's help and each command's --help.
func Read(ctx context.Context, bin string) (Doc, error) {
	top, err := run(ctx, bin, "help")
	if err != nil {
		return Doc{}, err
	}
	d, err := parseTop(top)
	if err != nil {
		return Doc{}, err
	}
	for i, c := range d.Commands {
		text, err := run(ctx, bin, c.Name, "--help")
		if err != nil {
			return Doc{}, err
		}
		if err := parseCommand(&d.Commands[i], text); err != nil {
			return Doc{}, fmt.Errorf("%s %s --help: %w", bin, c.Name, err)
		}
	}
	return d, nil
}

func run(ctx context.Context, bin string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"} // no SNIP_JOBS_CONFIG: the defaults as installed
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", bin, strings.Join(args, " "), err)
	}
	return string(out), nil
}

func parseTop(text string) (Doc, error) {
	var d Doc
	blocks := paragraphs(text)
	i := 0
	for ; i < len(blocks) && !strings.HasPrefix(blocks[i], "Usage:"); i++ {
		d.Intro = append(d.Intro, blocks[i])
	}
	if i == len(blocks) {
		return Doc{}, fmt.Errorf("help has no Usage: line:\n%s", text)
	}
	d.Usage = strings.TrimSpace(strings.TrimPrefix(blocks[i], "Usage:"))
	if i+1 >= len(blocks) || !strings.HasPrefix(blocks[i+1], "Commands:\n") {
		return Doc{}, fmt.Errorf("help has no Commands: list after its usage:\n%s", text)
	}
	for _, line := range strings.Split(blocks[i+1], "\n")[1:] {
		name, summary, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			return Doc{}, fmt.Errorf("help's command line %q has no summary", line)
		}
		d.Commands = append(d.Commands, Command{Name: name, Summary: strings.TrimSpace(summary)})
	}
	d.Outro = blocks[i+2:]
	return d, nil
}

func parseCommand(c *Command, text string) error {
	blocks := paragraphs(text)
	if len(blocks) == 0 || !strings.HasPrefix(blocks[0], "Usage: snip-jobs "+c.Name) {
		return fmt.Errorf("no usage line for %s", c.Name)
	}
	c.Usage = strings.TrimPrefix(blocks[0], "Usage: ")
	_, c.Args, _ = strings.Cut(c.Usage, "[flags]")
	c.Args = strings.TrimSpace(c.Args)
	for _, b := range blocks[1:] {
		if flags, ok := strings.CutPrefix(b, "Flags:\n"); ok {
			var err error
			if c.Flags, err = parseFlags(flags); err != nil {
				return err
			}
			continue
		}
		c.About = append(c.About, b)
	}
	return nil
}

// parseFlags reads flag.PrintDefaults: "  -name type" then its text on lines
// starting with "    \t", or "  -x\ttext" for a one-letter boolean.
func parseFlags(text string) ([]Flag, error) {
	var flags []Flag
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, "    \t"); ok && len(flags) > 0 {
			f := &flags[len(flags)-1]
			f.Text = strings.TrimSpace(f.Text + "\n" + rest)
			continue
		}
		rest, ok := strings.CutPrefix(line, "  -")
		if !ok {
			return nil, fmt.Errorf("flag line %q", line)
		}
		head, text, _ := strings.Cut(rest, "\t")
		name, arg, _ := strings.Cut(head, " ")
		flags = append(flags, Flag{Name: name, Arg: arg, Text: strings.TrimSpace(text)})
	}
	return flags, nil
}

// paragraphs splits text at blank lines, each paragraph's trailing space
// trimmed and its lines kept.
func paragraphs(text string) []string {
	var out []string
	for _, p := range strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n\n") {
		if p = strings.TrimRight(strings.Trim(p, "\n"), " \t"); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// TakesJob reports whether the command's arguments name a job.
func (c Command) TakesJob() bool { return strings.Contains(c.Args, "JOB") }

// Subcommands are the lower-case words of the command's arguments
// ("show|rebuild", "list | retry DOMAIN... | renew DOMAIN...").
func (c Command) Subcommands() []string {
	var subs []string
	for _, w := range strings.FieldsFunc(c.Args, func(r rune) bool { return r == '|' || r == ' ' }) {
		if w == strings.ToLower(w) && strings.Trim(w, "abcdefghijklmnopqrstuvwxyz-") == "" {
			subs = append(subs, w)
		}
	}
	return subs
}
