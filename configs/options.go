package configs

import (
	"errors"
)

// options reads the job's options: kept as the positioned node the job's type
// decodes (OptionsType), which Parse calls here so that every problem is
// reported with the rest of the file's.
func (p *parser) options(m *mapping, j Job, typeKnown bool) Options {
	e, node, present := m.get("options")
	o := Options{job: j.Name, pos: j.Pos}
	if !typeKnown {
		return o
	}
	check, _ := p.types.Options(j.Type)
	if check == nil {
		if present {
			m.errorf(e.keyPos, "job type %q takes no options", j.Type)
		}
		return o
	}
	if present {
		o.pos = p.pos(node)
		if _, isMap := mappingValues(node); !isMap {
			m.errorf(o.pos, "options must be a mapping of option names to values, not %s", describe(node))
			return o
		}
		p.checkDuplicates(e.value, "options", m.job)
		o.node = p.expand(e.value, m.job)
	}
	j.Options = o
	checked, err := check(j)
	if err != nil {
		var errs Errors
		if errors.As(err, &errs) {
			p.add(errs...)
		} else {
			m.errorf(o.pos, "options: %v", err)
		}
		return o
	}
	o.checked = checked
	return o
}
