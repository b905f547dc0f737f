package class

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"sigs.k8s.io/yaml"

	"github.com/lockd-dev/lockd/pkg/lockkey"
)

// Wire formats. Field types are strings so that enum and duration errors
// can be reported with the offending value.
type (
	metadataDoc struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	}
	classDoc struct {
		APIVersion string      `json:"apiVersion"`
		Kind       string      `json:"kind"`
		Metadata   metadataDoc `json:"metadata"`
		Spec       struct {
			Purpose               string   `json:"purpose"`
			Enforcement           string   `json:"enforcement"`
			TTL                   string   `json:"ttl"`
			Tier                  string   `json:"tier"`
			OnQuorumLoss          string   `json:"onQuorumLoss"`
			Fairness              string   `json:"fairness"`
			Resource              string   `json:"resource"`
			ResourceSchemaVersion string   `json:"resourceSchemaVersion"`
			RiskOwner             string   `json:"riskOwner"`
			WaiverExpires         string   `json:"waiverExpires"`
			Keys                  []string `json:"keys"`
			NestedIn              []string `json:"nestedIn"`
		} `json:"spec"`
	}
	grantDoc struct {
		APIVersion string      `json:"apiVersion"`
		Kind       string      `json:"kind"`
		Metadata   metadataDoc `json:"metadata"`
		Spec       struct {
			SPIFFEID   string   `json:"spiffeID"`
			Prefixes   []string `json:"prefixes"`
			SharedWith []string `json:"sharedWith"`
		} `json:"spec"`
	}
	homeDoc struct {
		APIVersion string      `json:"apiVersion"`
		Kind       string      `json:"kind"`
		Metadata   metadataDoc `json:"metadata"`
		Spec       struct {
			Region string `json:"region"`
		} `json:"spec"`
	}
	pauseTestDoc struct {
		APIVersion string      `json:"apiVersion"`
		Kind       string      `json:"kind"`
		Metadata   metadataDoc `json:"metadata"`
		Spec       struct {
			Class                 string `json:"class"`
			Resource              string `json:"resource"`
			ResourceSchemaVersion string `json:"resourceSchemaVersion"`
			Outcome               string `json:"outcome"`
			RanAt                 string `json:"ranAt"`
			Expires               string `json:"expires"`
			Tokens                struct {
				First  string `json:"first"`
				Second string `json:"second"`
			} `json:"tokens"`
		} `json:"spec"`
	}
)

// ParseFile parses and validates the YAML documents in data, read from
// path, and returns the valid classes and grants along with the problems
// found. namespaceFromDir is the name of the namespace folder the file is
// in; every object's metadata.namespace must equal it (an empty
// namespaceFromDir skips that check). now is used to check that risk
// waivers have not expired; a zero now skips that check, so a load does not
// depend on the clock (lockd loads that way: a lapsed waiver must not stop
// the service; class-lint fails on it instead). Objects with problems are
// not returned; PauseTestResult documents are checked but not returned (see
// [Parse]).
func ParseFile(path string, data []byte, namespaceFromDir string, now time.Time) ([]*Class, []Grant, []Problem) {
	f := Parse(path, data, namespaceFromDir, now)
	var (
		classes []*Class
		grants  []Grant
	)
	for _, o := range f.Objects {
		switch {
		case !o.Valid:
		case o.Class != nil:
			classes = append(classes, o.Class)
		case o.Grant != nil:
			grants = append(grants, *o.Grant)
		}
	}
	return classes, grants, f.Problems
}

// File is what [Parse] found in one file.
type File struct {
	// Objects are the documents that could be decoded, valid or not, in
	// file order, without duplicates.
	Objects []Object
	// Problems are all problems found, in file order.
	Problems []Problem
}

// Object is one decoded document: exactly one of Class, Grant, PauseTest
// and Home is set.
type Object struct {
	Class     *Class
	Grant     *Grant
	PauseTest *PauseTest
	Home      *Home
	// Valid is true when the document breaks no rule.
	Valid bool
}

func (o Object) key() (kind, ns, name string, line int) {
	switch {
	case o.Class != nil:
		return KindLockClass, o.Class.Namespace, o.Class.Name, o.Class.Line
	case o.Grant != nil:
		return KindLockGrant, o.Grant.Namespace, o.Grant.Name, o.Grant.Line
	case o.Home != nil:
		return KindLockNamespace, o.Home.Namespace, o.Home.Name, o.Home.Line
	default:
		return KindPauseTestResult, o.PauseTest.Namespace, o.PauseTest.Name, o.PauseTest.Line
	}
}

// Parse is like [ParseFile] but returns every object that could be decoded,
// including those that break a rule, so that tools (class-lint's cost and
// register) can work on a directory under review. A second object of the
// same kind, namespace and name is reported and dropped.
func Parse(path string, data []byte, namespaceFromDir string, now time.Time) File {
	p := &fileParser{path: path, nsDir: namespaceFromDir, now: now}
	docs := p.split(data)
	seen := make(map[string]int) // kind/ns/name → line
	var out File
	for _, d := range docs {
		o, decoded := p.parseDoc(d)
		if !decoded {
			continue
		}
		kind, ns, name, line := o.key()
		key := kind + "/" + ns + "/" + name
		if first, dup := seen[key]; dup {
			p.problems = append(p.problems, Problem{
				File: path, Line: line, Object: objectName(kind, ns, name), Field: "metadata.name",
				Rule: fmt.Sprintf("duplicate %s, first defined at line %d", kind, first), ID: RuleDuplicate,
			})
			continue
		}
		seen[key] = line
		out.Objects = append(out.Objects, o)
	}
	out.Problems = p.problems
	return out
}

type fileParser struct {
	path     string
	nsDir    string
	now      time.Time
	problems []Problem
}

// document is one YAML document of a file.
type document struct {
	lines []string // the document's lines
	first int      // file line number of lines[0]
	start int      // file line number of the first non-blank, non-comment line
}

// split splits data into documents on lines that are exactly "---",
// dropping documents that hold only blank lines and comments.
func (p *fileParser) split(data []byte) []document {
	var docs []document
	lines := strings.Split(string(data), "\n")
	cur := document{first: 1}
	flush := func() {
		for i, l := range cur.lines {
			if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
				cur.start = cur.first + i
				docs = append(docs, cur)
				return
			}
		}
	}
	for i, l := range lines {
		t := strings.TrimRight(l, " \t\r")
		if t == "---" {
			flush()
			cur = document{first: i + 2}
			continue
		}
		if strings.HasPrefix(l, "--- ") || strings.HasPrefix(l, "---\t") || t == "..." {
			// The YAML decoder would silently drop everything after such a
			// marker, so refuse it.
			p.problems = append(p.problems, Problem{File: p.path, Line: i + 1,
				Rule: `document markers must be lines containing exactly "---"`, ID: RuleSchema})
			l = ""
		}
		if body := l; strings.Contains(body, "\r") {
			if i < len(lines)-1 {
				body = strings.TrimSuffix(l, "\r") // CRLF
			}
			if strings.Contains(body, "\r") {
				// YAML reads a lone carriage return as a line break, so
				// every line number after it would differ from the one a
				// reviewer sees in the pull request: refuse the line.
				p.problems = append(p.problems, Problem{File: p.path, Line: i + 1,
					Rule: `a carriage return not followed by a newline: save the file with LF (or CRLF) line endings`, ID: RuleSchema})
				l = ""
			}
		}
		cur.lines = append(cur.lines, l)
	}
	flush()
	return docs
}

// docProblems collects the problems of one document, at most one per field.
type docProblems struct {
	p      *fileParser
	d      document
	object string
	fields map[string]bool
	n      int
}

// add records a schema problem with field.
func (dp *docProblems) add(field, rule string) { dp.addRule(RuleSchema, field, rule) }

// addRule records a problem with field under the rule id.
func (dp *docProblems) addRule(id, field, rule string) {
	if dp.fields[field] {
		return
	}
	dp.fields[field] = true
	dp.n++
	dp.p.problems = append(dp.p.problems, Problem{
		File: dp.p.path, Line: dp.d.fieldLine(field), Object: dp.object, Field: field, Rule: rule, ID: id,
	})
}

func (dp *docProblems) addAt(line int, rule string) {
	dp.n++
	dp.p.problems = append(dp.p.problems, Problem{File: dp.p.path, Line: line, Object: dp.object, Rule: rule, ID: RuleSchema})
}

// parseDoc parses and validates one document. It returns the decoded
// object (Valid when it has no problems) and true, or false when the
// document could not be decoded as an object of a known kind.
func (p *fileParser) parseDoc(d document) (Object, bool) {
	dp := &docProblems{p: p, d: d, fields: make(map[string]bool)}
	js, err := yaml.YAMLToJSONStrict([]byte(strings.Join(d.lines, "\n")))
	if err != nil {
		for _, e := range yamlErrors(err) {
			line, msg := d.start, e.msg
			switch {
			case e.line > len(d.lines):
				// The decoder names the line after the last at the end
				// of the input: name the document's last line.
				line, msg = d.first+len(d.lines)-1, msg+" (at the end of the document)"
			case e.line > 0:
				line = d.first + e.line - 1
			}
			dp.addAt(line, msg)
		}
		return Object{}, false
	}
	var raw any
	if err := json.Unmarshal(js, &raw); err != nil {
		dp.addAt(d.start, err.Error())
		return Object{}, false
	}
	m, ok := raw.(map[string]any)
	if !ok {
		dp.addAt(d.start, fmt.Sprintf("document must be a mapping, got %s", jsonKind(raw)))
		return Object{}, false
	}
	kind, _ := m["kind"].(string)
	meta, _ := m["metadata"].(map[string]any)
	ns, _ := meta["namespace"].(string)
	name, _ := meta["name"].(string)
	dp.object = objectName(kind, ns, name)

	switch v, ok := m["apiVersion"].(string); {
	case !ok || v == "":
		dp.add("apiVersion", "is required")
	case v != APIVersion:
		dp.add("apiVersion", fmt.Sprintf("must be %s, got %q", APIVersion, v))
	}
	var o Object
	switch kind {
	case KindLockClass:
		var doc classDoc
		if !dp.decode(js, m, &doc) {
			return Object{}, false
		}
		o.Class = dp.class(&doc)
	case KindLockGrant:
		var doc grantDoc
		if !dp.decode(js, m, &doc) {
			return Object{}, false
		}
		o.Grant = dp.grant(&doc)
	case KindPauseTestResult:
		var doc pauseTestDoc
		if !dp.decode(js, m, &doc) {
			return Object{}, false
		}
		o.PauseTest = dp.pauseTest(&doc)
	case KindLockNamespace:
		var doc homeDoc
		if !dp.decode(js, m, &doc) {
			return Object{}, false
		}
		o.Home = dp.home(&doc)
	case "":
		dp.add("kind", fmt.Sprintf("is required (%s)", kinds))
		return Object{}, false
	default:
		dp.add("kind", fmt.Sprintf("must be %s, got %q", kinds, kind))
		return Object{}, false
	}
	o.Valid = dp.n == 0
	return o, true
}

var kinds = KindLockClass + ", " + KindLockGrant + ", " + KindLockNamespace + " or " + KindPauseTestResult

// decode strictly decodes js into doc, reporting unknown fields (all of
// them, with their paths) and type errors. It returns false if doc could
// not be decoded at all.
func (dp *docProblems) decode(js []byte, raw map[string]any, doc any) bool {
	unknown := unknownFields(raw, reflect.TypeOf(doc).Elem(), "")
	for _, f := range unknown {
		dp.add(f, "unknown field")
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	err := dec.Decode(doc)
	if err != nil && len(unknown) > 0 {
		// Unknown fields are reported above; decode the rest leniently so
		// the other fields can still be checked.
		err = json.Unmarshal(js, doc)
	}
	var te *json.UnmarshalTypeError
	switch {
	case err == nil:
		return true
	case errors.As(err, &te) && te.Field != "":
		dp.add(te.Field, fmt.Sprintf("must be a %s, got %s", typeName(te.Type), te.Value))
		return true
	default:
		dp.addAt(dp.d.start, err.Error())
		return false
	}
}

func (dp *docProblems) metadata(m metadataDoc) {
	dp.dnsLabel("metadata.name", m.Name, "")
	if dp.dnsLabel("metadata.namespace", m.Namespace, "") && dp.p.nsDir != "" && m.Namespace != dp.p.nsDir {
		dp.addRule(RuleNamespaceFolder, "metadata.namespace", fmt.Sprintf("must equal the namespace folder %q, got %q", dp.p.nsDir, m.Namespace))
	}
}

// dnsLabel checks a required field that must be a DNS label, reporting it
// missing (with why, when not empty) or malformed; it reports whether v is
// a DNS label.
func (dp *docProblems) dnsLabel(field, v, why string) bool {
	switch {
	case v == "":
		dp.add(field, strings.TrimSuffix("is required: "+why, ": "))
	case !lockkey.IsDNSLabel(v):
		dp.add(field, fmt.Sprintf("must be a DNS label ([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?), got %q", v))
	default:
		return true
	}
	return false
}

func (dp *docProblems) class(doc *classDoc) *Class {
	dp.metadata(doc.Metadata)
	s := doc.Spec
	c := &Class{
		Namespace:             doc.Metadata.Namespace,
		Name:                  doc.Metadata.Name,
		Purpose:               Purpose(s.Purpose),
		Enforcement:           Enforcement(s.Enforcement),
		Tier:                  Tier(s.Tier),
		OnQuorumLoss:          QuorumLossPolicy(s.OnQuorumLoss),
		Fairness:              Fairness(s.Fairness),
		Resource:              s.Resource,
		ResourceSchemaVersion: s.ResourceSchemaVersion,
		RiskOwner:             s.RiskOwner,
		Keys:                  slices.Clone(s.Keys),
		NestedIn:              slices.Clone(s.NestedIn),
		Source:                dp.p.path,
		Line:                  dp.d.start,
	}
	dp.classKeys(c)
	enum(dp, RuleSchema, "spec.purpose", c.Purpose, true, PurposeCorrectness, PurposeEfficiency)
	enum(dp, RuleSchema, "spec.enforcement", c.Enforcement, true, EnforcementFenced, EnforcementAdvisory)
	enum(dp, RuleTierRequired, "spec.tier", c.Tier, true, TierEntity, TierCoord)
	if c.OnQuorumLoss == "" {
		c.OnQuorumLoss = QuorumLossClosed
	}
	if enum(dp, RuleSchema, "spec.onQuorumLoss", c.OnQuorumLoss, false, QuorumLossClosed, QuorumLossOpen) && c.OnQuorumLoss == QuorumLossOpen {
		switch {
		case c.Purpose == PurposeCorrectness:
			dp.addRule(RuleQuorumLossOpen, "spec.onQuorumLoss", "open is not allowed for purpose correctness: a lock granted without quorum may be held twice")
		case c.Enforcement == EnforcementFenced:
			dp.addRule(RuleQuorumLossOpen, "spec.onQuorumLoss", "open is not allowed for enforcement fenced: fencing tokens need quorum")
		}
	}
	if c.Fairness == "" {
		c.Fairness = FairnessBestEffort
	}
	enum(dp, RuleSchema, "spec.fairness", c.Fairness, false, FairnessBestEffort, FairnessDurable)

	advisory := c.Enforcement == EnforcementAdvisory
	c.TTL = DefaultTTL
	ttlDesc := DefaultTTL.String() + " (the default)"
	if s.TTL != "" {
		ttlDesc = s.TTL
		d, err := time.ParseDuration(s.TTL)
		if err != nil {
			dp.add("spec.ttl", fmt.Sprintf("must be a Go duration such as 15s, got %q", s.TTL))
		}
		c.TTL = d
	}
	switch {
	case c.TTL < MinTTL || c.TTL > MaxTTL:
		dp.addRule(RuleTTLRange, "spec.ttl", fmt.Sprintf("must be between %s and %s, got %s", seconds(MinTTL), seconds(MaxTTL), ttlDesc))
	case advisory && c.TTL < MinAdvisoryTTL:
		dp.addRule(RuleAdvisoryTTLFloor, "spec.ttl", fmt.Sprintf("advisory classes must have a ttl of at least %v, got %s", MinAdvisoryTTL, ttlDesc))
	}

	if advisory && c.RiskOwner == "" {
		dp.addRule(RuleAdvisoryRiskOwner, "spec.riskOwner", "is required for advisory classes")
	}
	switch {
	case s.WaiverExpires != "":
		t, err := parseWaiver(s.WaiverExpires)
		if err != nil {
			dp.add("spec.waiverExpires", fmt.Sprintf("must be a date YYYY-MM-DD or an RFC 3339 time, got %q", s.WaiverExpires))
			break
		}
		c.WaiverExpires = t
		if advisory && !dp.p.now.IsZero() && !t.After(dp.p.now) {
			dp.addRule(RuleAdvisoryWaiver, "spec.waiverExpires", fmt.Sprintf("waiver expired: %s is not in the future (now %s)",
				s.WaiverExpires, dp.p.now.UTC().Format(time.RFC3339)))
		}
	case advisory:
		dp.addRule(RuleAdvisoryWaiver, "spec.waiverExpires", "is required for advisory classes")
	}
	return c
}

// classKeys checks spec.keys and spec.nestedIn of one class: the rules
// that need nothing but the class. Whether prefixes clash with another
// class's is [CheckOwnership]'s.
func (dp *docProblems) classKeys(c *Class) {
	if len(c.Keys) == 0 {
		ex := "<namespace>/orders/"
		if c.Namespace != "" {
			ex = c.Namespace + "/orders/"
		}
		dp.addRule(RuleClassKeys, "spec.keys", fmt.Sprintf("must list at least one key prefix the class owns, such as %q: a key no class owns cannot be locked", ex))
	}
	for i, pfx := range c.Keys {
		field := fmt.Sprintf("spec.keys[%d]", i)
		if c.Namespace != "" && !strings.HasPrefix(pfx, c.Namespace+"/") {
			dp.addRule(RuleClassKeys, field, fmt.Sprintf("must start with the class's namespace %q, got %q", c.Namespace+"/", pfx))
			continue
		}
		if err := lockkey.ValidatePrefix(pfx); err != nil {
			rule := strings.TrimPrefix(err.Error(), lockkey.ErrInvalidKey.Error()+": ")
			dp.addRule(RuleClassKeys, field, fmt.Sprintf("invalid prefix %q: %s", pfx, rule))
			continue
		}
		for j, other := range c.Keys[:i] {
			switch {
			case other == pfx:
				dp.addRule(RuleClassKeys, field, fmt.Sprintf("%q is listed twice (spec.keys[%d])", pfx, j))
			case strings.HasPrefix(pfx, other) || strings.HasPrefix(other, pfx):
				outer, inner := other, pfx
				if len(pfx) < len(other) {
					outer, inner = pfx, other
				}
				dp.addRule(RuleClassKeys, field, fmt.Sprintf("%q is inside %q, also listed: list only %q", inner, outer, outer))
			}
		}
	}
	for i, n := range c.NestedIn {
		field := fmt.Sprintf("spec.nestedIn[%d]", i)
		switch {
		case !lockkey.IsDNSLabel(n):
			dp.addRule(RuleClassKeys, field, fmt.Sprintf("must be the name of a class of the namespace (a DNS label), got %q", n))
		case n == c.Name:
			dp.addRule(RuleClassKeys, field, "names the class itself")
		case slices.Contains(c.NestedIn[:i], n):
			dp.addRule(RuleClassKeys, field, fmt.Sprintf("%q is listed twice", n))
		}
	}
}

func (dp *docProblems) grant(doc *grantDoc) *Grant {
	dp.metadata(doc.Metadata)
	s := doc.Spec
	g := &Grant{
		Namespace:  doc.Metadata.Namespace,
		Name:       doc.Metadata.Name,
		SPIFFEID:   s.SPIFFEID,
		Prefixes:   s.Prefixes,
		SharedWith: s.SharedWith,
		Source:     dp.p.path,
		Line:       dp.d.start,
	}
	if s.SPIFFEID == "" {
		dp.add("spec.spiffeID", "is required")
	} else if id, err := spiffeid.FromString(s.SPIFFEID); err != nil {
		dp.add("spec.spiffeID", fmt.Sprintf("must be a spiffe://<trust-domain>/<path> URI, got %q: %v", s.SPIFFEID, err))
	} else if id.Path() == "" {
		dp.add("spec.spiffeID", fmt.Sprintf("must have a path after the trust domain, got %q", s.SPIFFEID))
	}
	if len(s.Prefixes) == 0 {
		dp.add("spec.prefixes", "must list at least one prefix")
	}
	for i, pfx := range s.Prefixes {
		field := fmt.Sprintf("spec.prefixes[%d]", i)
		if g.Namespace != "" && !strings.HasPrefix(pfx, g.Namespace+"/") {
			dp.addRule(RuleGrantNamespace, field, fmt.Sprintf("must start with the grant's namespace %q, got %q", g.Namespace+"/", pfx))
			continue
		}
		if err := lockkey.ValidatePrefix(pfx); err != nil {
			rule := strings.TrimPrefix(err.Error(), lockkey.ErrInvalidKey.Error()+": ")
			dp.add(field, fmt.Sprintf("invalid prefix %q: %s", pfx, rule))
		}
	}
	return g
}

func (dp *docProblems) home(doc *homeDoc) *Home {
	dp.metadata(doc.Metadata)
	h := &Home{
		Namespace: doc.Metadata.Namespace,
		Name:      doc.Metadata.Name,
		Region:    doc.Spec.Region,
		Source:    dp.p.path,
		Line:      dp.d.start,
	}
	dp.dnsLabel("spec.region", h.Region, "the region whose lockd serves the namespace's keys")
	return h
}

func (dp *docProblems) pauseTest(doc *pauseTestDoc) *PauseTest {
	dp.metadata(doc.Metadata)
	s := doc.Spec
	pt := &PauseTest{
		Namespace:             doc.Metadata.Namespace,
		Name:                  doc.Metadata.Name,
		Class:                 s.Class,
		Resource:              s.Resource,
		ResourceSchemaVersion: s.ResourceSchemaVersion,
		Outcome:               s.Outcome,
		FirstToken:            s.Tokens.First,
		SecondToken:           s.Tokens.Second,
		Source:                dp.p.path,
		Line:                  dp.d.start,
	}
	switch {
	case s.Class == "":
		dp.add("spec.class", "is required (the name of the class tested)")
	case !lockkey.IsDNSLabel(s.Class):
		dp.add("spec.class", fmt.Sprintf("must be a class name (a DNS label), got %q", s.Class))
	}
	if s.Resource == "" {
		dp.add("spec.resource", "is required (the resource the test wrote to)")
	}
	if s.Outcome != PauseTestOutcomePass {
		dp.add("spec.outcome", fmt.Sprintf("must be %q (the kit writes no result for a failed run), got %q", PauseTestOutcomePass, s.Outcome))
	}
	for _, tf := range []struct {
		field, v string
		to       *time.Time
	}{{"spec.ranAt", s.RanAt, &pt.RanAt}, {"spec.expires", s.Expires, &pt.Expires}} {
		if tf.v == "" {
			dp.add(tf.field, "is required (an RFC 3339 time)")
			continue
		}
		t, err := time.Parse(time.RFC3339, tf.v)
		if err != nil {
			dp.add(tf.field, fmt.Sprintf("must be an RFC 3339 time, got %q", tf.v))
			continue
		}
		*tf.to = t
	}
	if !pt.RanAt.IsZero() && !pt.Expires.IsZero() && !pt.Expires.After(pt.RanAt) {
		dp.add("spec.expires", "must be after spec.ranAt")
	}
	for _, tf := range []struct{ field, v string }{{"spec.tokens.first", s.Tokens.First}, {"spec.tokens.second", s.Tokens.Second}} {
		if _, err := strconv.ParseUint(tf.v, 10, 64); err != nil {
			dp.add(tf.field, fmt.Sprintf("must be a fencing token as a decimal string, got %q", tf.v))
		}
	}
	if a, errA := strconv.ParseUint(s.Tokens.First, 10, 64); errA == nil {
		if b, errB := strconv.ParseUint(s.Tokens.Second, 10, 64); errB == nil && b <= a {
			dp.add("spec.tokens.second", fmt.Sprintf("must be greater than spec.tokens.first (%d): the second holder's token is newer", a))
		}
	}
	return pt
}

// enum reports whether v is one of allowed, adding a problem otherwise.
func enum[T ~string](dp *docProblems, id, field string, v T, required bool, allowed ...T) bool {
	if v == "" && required {
		dp.addRule(id, field, fmt.Sprintf("is required (one of %s)", joinEnum(allowed)))
		return false
	}
	if !slices.Contains(allowed, v) {
		dp.addRule(RuleSchema, field, fmt.Sprintf("must be one of %s, got %q", joinEnum(allowed), v))
		return false
	}
	return true
}

func joinEnum[T ~string](vs []T) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = string(v)
	}
	return strings.Join(s, ", ")
}

// parseWaiver parses a date (YYYY-MM-DD, meaning 00:00 UTC) or an RFC 3339
// time.
func parseWaiver(s string) (time.Time, error) {
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	return time.Parse(time.RFC3339, s)
}

func objectName(kind, ns, name string) string {
	if kind == "" {
		kind = "object"
	}
	if ns == "" {
		ns = "?"
	}
	if name == "" {
		name = "?"
	}
	return kind + " " + ns + "/" + name
}

// unknownFields returns the paths of the keys of v that have no field in
// t, compared case-sensitively.
func unknownFields(v any, t reflect.Type, path string) []string {
	var out []string
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return nil // a type error, reported by the decoder
		}
		known := make(map[string]reflect.Type, t.NumField())
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			known[name] = f.Type
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			p := k
			if path != "" {
				p = path + "." + k
			}
			ft, ok := known[k]
			if !ok {
				out = append(out, p)
				continue
			}
			out = append(out, unknownFields(m[k], ft, p)...)
		}
	case reflect.Slice:
		a, _ := v.([]any)
		for i, e := range a {
			out = append(out, unknownFields(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i))...)
		}
	}
	return out
}

func typeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Slice:
		return "list"
	case reflect.Struct, reflect.Map:
		return "mapping"
	default:
		return t.String()
	}
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case []any:
		return "a list"
	case string:
		return "a string"
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	default:
		return fmt.Sprintf("%T", v)
	}
}

type yamlError struct {
	line int // 1-based line within the document, 0 if unknown
	msg  string
}

var yamlLineRE = regexp.MustCompile(`^\s*(?:yaml: )?line (\d+): (.*)$`)

// yamlErrors splits a YAML decoder error into per-line messages.
func yamlErrors(err error) []yamlError {
	var out []yamlError
	for _, l := range strings.Split(err.Error(), "\n") {
		if m := yamlLineRE.FindStringSubmatch(l); m != nil {
			n, _ := strconv.Atoi(m[1])
			out = append(out, yamlError{line: n, msg: "invalid YAML: " + m[2]})
		}
	}
	if len(out) == 0 {
		out = append(out, yamlError{msg: "invalid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")})
	}
	return out
}

// fieldLine returns the file line of the field at path (e.g. "spec.ttl" or
// "spec.prefixes[1]") in block-style YAML, or the closest enclosing field
// found, or the document start.
func (d document) fieldLine(path string) int {
	best := d.start
	if path == "" {
		return best
	}
	parent := -1 // indentation of the enclosing key
	from := 0
	for _, seg := range strings.Split(path, ".") {
		idx := -1
		if i := strings.IndexByte(seg, '['); i >= 0 && strings.HasSuffix(seg, "]") {
			idx, _ = strconv.Atoi(seg[i+1 : len(seg)-1])
			seg = seg[:i]
		}
		at, indent := d.findKey(from, parent, seg)
		if at < 0 {
			return best
		}
		best, parent, from = d.first+at, indent, at+1
		if idx >= 0 {
			// Block list items below the key.
			n := 0
			for i := from; i < len(d.lines); i++ {
				t, ind, ok := contentLine(d.lines[i])
				if !ok {
					continue
				}
				if ind < parent || ind == parent && !strings.HasPrefix(t, "- ") {
					break
				}
				if strings.HasPrefix(t, "- ") || t == "-" {
					if n == idx {
						return d.first + i
					}
					n++
				}
			}
			return best
		}
	}
	return best
}

// findKey finds the line index of key among the direct children of the
// block at indentation parent, starting at line index from.
func (d document) findKey(from, parent int, key string) (line, indent int) {
	child := -1
	for i := from; i < len(d.lines); i++ {
		t, ind, ok := contentLine(d.lines[i])
		if !ok {
			continue
		}
		if ind <= parent {
			break
		}
		if child < 0 {
			child = ind
		}
		if ind == child && (strings.HasPrefix(t, key+":") || strings.HasPrefix(t, `"`+key+`":`)) {
			return i, ind
		}
	}
	return -1, 0
}

// contentLine returns the text and indentation of a line that is neither
// blank nor a comment.
func contentLine(l string) (string, int, bool) {
	t := strings.TrimLeft(l, " ")
	if strings.TrimSpace(t) == "" || strings.HasPrefix(t, "#") {
		return "", 0, false
	}
	return t, len(l) - len(t), true
}

// seconds formats a whole number of seconds as "300s" rather than "5m0s".
func seconds(d time.Duration) string { return fmt.Sprintf("%ds", int(d/time.Second)) }
