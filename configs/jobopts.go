package configs

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	yamlparser "github.com/goccy/go-yaml/parser"
)

// Options is a job's `options:` as written: a YAML mapping that keeps its
// positions (anchors and aliases expanded), which the job's type decodes with
// DecodeOptions. The zero value is an entry without options.
type Options struct {
	node ast.Node // nil when the entry has none
	pos  Pos      // where the mapping starts; the job's entry when absent
	job  string
	// checked is what the type's OptionsType gave at Parse: what Redacted
	// prints.
	checked Checked
	// files are the files the options name (checked.Files), each with
	// where it is written, for File.Files.
	files []NamedFile
}

// Present reports whether the entry wrote options.
func (o Options) Present() bool { return o.node != nil }

// OptionsType is how a job type reads its options: it decodes and checks
// spec.Options (DecodeOptions), and says what Parse keeps of them. An error is
// Errors, each at its file:line (any other error is reported at options:).
type OptionsType func(spec Job) (Checked, error)

// Checked is what Parse keeps of a job's decoded options.
type Checked struct {
	// Effective is printed by File.Redacted: the options, defaults filled in.
	// It must hold no secrets (name a file or an environment variable).
	Effective any
	// Files are the files the options name, for the checks of every file
	// the config names (File.Files, File.CheckFiles).
	Files []OptionFile
}

// OptionFile is a file a job's option names.
type OptionFile struct {
	Key   string // the option's key, as written in the file
	Path  string // "": the option is not set
	Holds FileKind
}

// OptionsOf is the OptionsType of options of type T, starting from defaults()
// (see DecodeOptions). If *T has a Files() []OptionFile method, its result is
// the options' Files.
func OptionsOf[T any](defaults func() T) OptionsType {
	return func(spec Job) (Checked, error) {
		v, err := DecodeOptions(spec, defaults)
		if err != nil {
			return Checked{}, err
		}
		c := Checked{Effective: v}
		if s, ok := any(&v).(interface{ Files() []OptionFile }); ok {
			c.Files = s.Files()
		}
		return c, nil
	}
}

// DecodeOptions decodes spec's options as a T, starting from defaults():
// strictly (an unknown key is an error), then by *T's Validate() error method
// if it has one (an *OptionError is reported at that option's value). Every
// problem is reported, as Errors, each at its file:line with the job's name.
// Job types call it from their OptionsType (through OptionsOf) and from New.
func DecodeOptions[T any](spec Job, defaults func() T) (T, error) {
	o := spec.Options
	dec := &optionsDecoder{doc: newDocument(o.pos.File, &problems{}), job: spec.Name}
	pos := o.pos
	if pos == (Pos{}) {
		pos = spec.Pos
	}
	opts := defaults()
	fresh := func() any { v := defaults(); return &v }
	if o.node != nil {
		whole := dec.wholeNumbers(o.node, reflect.TypeFor[T](), "options")
		decoded, ok := dec.decode(o.node, fresh, pos)
		if !ok || !whole {
			return opts, dec.doc.errs
		}
		opts = *decoded.(*T)
	}
	if v, ok := any(&opts).(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			for _, e := range splitErrorValues(err) {
				var oe *OptionError
				if errors.As(e, &oe) && o.node != nil {
					dec.errorf(dec.doc.entryValuePos(o.node, oe.Key, pos), "options.%s: %v", oe.Key, oe.Err)
				} else {
					dec.errorf(pos, "options: %v", e)
				}
			}
		}
	}
	if errs := dec.doc.errs; len(errs) > 0 {
		sortErrors(errs)
		return opts, errs
	}
	return opts, nil
}

// OptionError is a problem a job type's Validate finds with one option: Parse
// reports it at that option's value rather than at options:.
type OptionError struct {
	Key string // the option's key, as written in the file
	Err error
}

func (e *OptionError) Error() string { return e.Key + ": " + e.Err.Error() }
func (e *OptionError) Unwrap() error { return e.Err }

// encodedFile names the text EncodeOptions writes, in messages.
const encodedFile = "(options written in code)"

// EncodeOptions writes v (an options value) as a job's options, as if a file
// had them: for jobs built in code rather than read from a file.
func EncodeOptions(v any) (Options, error) {
	text, err := yaml.Marshal(v)
	if err != nil {
		return Options{}, fmt.Errorf("options %T: %w", v, err)
	}
	f, err := yamlparser.ParseBytes(text, 0)
	if err != nil || len(f.Docs) != 1 {
		return Options{}, fmt.Errorf("options %T: written as %q, which does not parse back: %v", v, text, err)
	}
	n := f.Docs[0].Body
	if _, isMap := mappingValues(n); !isMap {
		return Options{}, fmt.Errorf("options %T: written as %s, not a mapping", v, describe(n))
	}
	return Options{node: n, pos: Pos{File: encodedFile, Line: 1, Col: 1}}, nil
}
