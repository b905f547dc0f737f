package main

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// Block kinds.
const (
	kindRun   = "run"
	kindServe = "serve"
	kindSkip  = "skip"
)

// block is one ```sh block of a document.
type block struct {
	file   string
	line   int // the fence's line
	kind   string
	reason string   // for kindSkip
	exit   int      // the exit status the doc says the block ends with
	script string   // the block's text, verbatim
	output []string // the promised output; nil when none is promised
}

func (b block) where() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

var directive = regexp.MustCompile(`^<!--\s*docrun:\s*(\w+)\s*(.*?)\s*-->\s*$`)

// parse returns the ```sh blocks of a Markdown document in order.
func parse(file string, r io.Reader) ([]block, error) {
	var (
		out       []block
		pending   string // the directive on the line before a fence
		reason    string
		cur       *block
		inOther   bool // inside a fence that is not sh (or an output block)
		outputFor *block
		lineNo    int
	)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lineNo++
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case cur != nil: // inside an sh block
			if strings.HasPrefix(trimmed, "```") {
				out = append(out, *cur)
				cur = nil
				continue
			}
			cur.script += line + "\n"
		case inOther:
			if strings.HasPrefix(trimmed, "```") {
				inOther, outputFor = false, nil
				continue
			}
			if outputFor != nil {
				outputFor.output = append(outputFor.output, line)
			}
		case strings.HasPrefix(trimmed, "```"):
			info := strings.TrimSpace(strings.TrimPrefix(trimmed, "```"))
			switch {
			case info == "sh":
				kind, exit := kindRun, 0
				switch pending {
				case "", "run":
				case kindServe, kindSkip:
					kind = pending
				case "exit":
					n, err := strconv.Atoi(reason)
					if err != nil || n < 1 || n > 255 {
						return nil, fmt.Errorf("%s:%d: docrun: exit needs a status from 1 to 255, not %q", file, lineNo-1, reason)
					}
					exit = n
				default:
					return nil, fmt.Errorf("%s:%d: unknown docrun directive %q (run, serve, skip, exit, output)", file, lineNo-1, pending)
				}
				if kind == kindSkip && reason == "" {
					return nil, fmt.Errorf("%s:%d: docrun: skip needs a reason", file, lineNo-1)
				}
				cur = &block{file: file, line: lineNo, kind: kind, reason: reason, exit: exit}
				if kind != kindSkip {
					cur.reason = ""
				}
			case pending == "output":
				if len(out) == 0 {
					return nil, fmt.Errorf("%s:%d: docrun: output with no sh block before it", file, lineNo)
				}
				outputFor = &out[len(out)-1]
				outputFor.output = []string{}
				inOther = true
			default:
				inOther = true
			}
			pending, reason = "", ""
		default:
			if m := directive.FindStringSubmatch(trimmed); m != nil {
				pending, reason = m[1], m[2]
			} else if trimmed != "" {
				pending, reason = "", ""
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: sh block is not closed", file, cur.line)
	}
	return out, nil
}

// matches reports whether got (lines) is what want promises; it returns
// the first promised line that did not match.
func matches(want, got []string) (bool, string) {
	if len(want) == 0 {
		return len(got) == 0, "(nothing)"
	}
	w := want[0]
	if strings.TrimSpace(w) == "…" {
		for i := 0; i <= len(got); i++ {
			if ok, _ := matches(want[1:], got[i:]); ok {
				return true, ""
			}
		}
		return false, firstOf(want[1:])
	}
	if len(got) == 0 || !lineMatches(w, got[0]) {
		return false, w
	}
	return matches(want[1:], got[1:])
}

func firstOf(s []string) string {
	if len(s) == 0 {
		return "(end of output)"
	}
	return s[0]
}

// lineMatches: "…" in the promised line stands for any text.
func lineMatches(want, got string) bool {
	parts := strings.Split(want, "…")
	quoted := make([]string, len(parts))
	for i, p := range parts {
		quoted[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile("^" + strings.Join(quoted, ".*") + "$").MatchString(strings.TrimRight(got, " "))
}
