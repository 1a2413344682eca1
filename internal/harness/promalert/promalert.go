// Package promalert evaluates Prometheus alert expressions over two scrapes of one gateway's
// /metrics, so that a test can show which of the user guide's alerts a run makes fire.
//
// It understands the subset of PromQL the guide's alerts use: selectors with equality
// matchers, rate and increase over a range, clamp_min, sum, max and min (with or without
// "by"), the arithmetic operators, the comparisons (as filters), and "and" and "or". Two
// scrapes stand in for the range: rate is the difference over the time between them, increase
// the difference, whatever range the expression names. An alert fires when its expression
// gives a non-empty vector; its "for" clause is not modelled (the test decides how long it
// watched). Anything else is an error, so that an alert the evaluator cannot read fails the
// test rather than passing silently.
package promalert

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Series is one sample of a scrape: the metric's name, its labels and its value.
type Series struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Scrape is a gateway's /metrics at one instant.
type Scrape struct {
	At     time.Time
	Series []Series
}

// ParseText reads the Prometheus text exposition format (comments and blank lines skipped;
// timestamps, if any, ignored).
func ParseText(r io.Reader, at time.Time) (Scrape, error) {
	s := Scrape{At: at}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for line := 1; sc.Scan(); line++ {
		l := strings.TrimSpace(sc.Text())
		if l == "" || l[0] == '#' {
			continue
		}
		se, err := parseSample(l)
		if err != nil {
			return Scrape{}, fmt.Errorf("promalert: line %d: %w", line, err)
		}
		s.Series = append(s.Series, se)
	}
	if err := sc.Err(); err != nil {
		return Scrape{}, fmt.Errorf("promalert: reading the scrape: %w", err)
	}
	return s, nil
}

func parseSample(l string) (Series, error) {
	se := Series{Labels: map[string]string{}}
	i := strings.IndexAny(l, "{ ")
	if i <= 0 {
		return se, fmt.Errorf("no value in %q", l)
	}
	se.Name = l[:i]
	rest := l[i:]
	if rest[0] == '{' {
		end := -1
		for j := 1; j < len(rest); j++ {
			if rest[j] == '}' {
				end = j
				break
			}
			if rest[j] == '"' { // skip the quoted value, escapes included
				for j++; j < len(rest) && rest[j] != '"'; j++ {
					if rest[j] == '\\' {
						j++
					}
				}
			}
		}
		if end < 0 {
			return se, fmt.Errorf("labels not closed in %q", l)
		}
		if err := parseLabels(rest[1:end], se.Labels); err != nil {
			return se, fmt.Errorf("%q: %w", l, err)
		}
		rest = rest[end+1:]
	}
	f := strings.Fields(rest)
	if len(f) < 1 {
		return se, fmt.Errorf("no value in %q", l)
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return se, fmt.Errorf("value of %q: %w", l, err)
	}
	se.Value = v
	return se, nil
}

func parseLabels(s string, into map[string]string) error {
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(s), ",")) {
		eq := strings.IndexByte(s, '=')
		if eq <= 0 || eq+1 >= len(s) || s[eq+1] != '"' {
			return fmt.Errorf("label %q", s)
		}
		name := strings.TrimSpace(s[:eq])
		v, n, err := unquote(s[eq+1:])
		if err != nil {
			return err
		}
		into[name] = v
		s = s[eq+1+n:]
	}
	return nil
}

// unquote reads a double-quoted string at the start of s; it returns the value and the
// octets it took.
func unquote(s string) (string, int, error) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			return b.String(), i + 1, nil
		case '\\':
			i++
			if i >= len(s) {
				return "", 0, fmt.Errorf("escape at the end of %q", s)
			}
			switch s[i] {
			case 'n':
				b.WriteByte('\n')
			default:
				b.WriteByte(s[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", 0, fmt.Errorf("string not closed: %q", s)
}

// Sample is one element of an expression's result: labels (no metric name) and a value.
type Sample struct {
	Labels map[string]string
	Value  float64
}

// value is an expression's result: a scalar or an instant vector.
type value struct {
	scalar bool
	s      float64
	v      []Sample
}

// Evaluate computes expr over the scrapes before and after (after must be the later one):
// its vector, empty when the alert would not fire. A scalar result is an error: an alert is
// a vector.
func Evaluate(expr string, before, after Scrape) ([]Sample, error) {
	if !after.At.After(before.At) {
		return nil, fmt.Errorf("promalert: the scrapes are not in order (%v, %v)", before.At, after.At)
	}
	p := &parser{toks: nil, before: before, after: after}
	toks, err := lex(expr)
	if err != nil {
		return nil, fmt.Errorf("promalert: %q: %w", expr, err)
	}
	p.toks = toks
	v, err := p.expr(0)
	if err == nil && p.pos < len(p.toks) {
		err = fmt.Errorf("unexpected %q", p.toks[p.pos].text)
	}
	if err != nil {
		return nil, fmt.Errorf("promalert: %q: %w", expr, err)
	}
	if v.scalar {
		return nil, fmt.Errorf("promalert: %q is a scalar, not a vector", expr)
	}
	return v.v, nil
}

// Fires reports whether expr gives a non-empty vector over the two scrapes.
func Fires(expr string, before, after Scrape) (bool, error) {
	v, err := Evaluate(expr, before, after)
	return len(v) > 0, err
}

type tokKind uint8

const (
	tNum tokKind = iota
	tIdent
	tStr
	tOp
	tLParen
	tRParen
	tLBrace
	tRBrace
	tLBracket
	tRBracket
	tComma
)

type token struct {
	kind tokKind
	text string
	num  float64
}

func lex(s string) ([]token, error) {
	var out []token
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			i++
		case c >= '0' && c <= '9' || c == '.':
			j := i
			for j < len(s) && (s[j] >= '0' && s[j] <= '9' || s[j] == '.' || s[j] == 'e' || s[j] == 'E' ||
				(s[j] == '-' || s[j] == '+') && j > i && (s[j-1] == 'e' || s[j-1] == 'E')) {
				j++
			}
			// A range's duration (5m, 10s, 1h) is read as one token.
			if j < len(s) && strings.ContainsRune("smhd", rune(s[j])) && (j+1 == len(s) || !isIdent(s[j+1])) {
				out = append(out, token{kind: tIdent, text: s[i : j+1]})
				i = j + 1
				continue
			}
			n, err := strconv.ParseFloat(s[i:j], 64)
			if err != nil {
				return nil, fmt.Errorf("number %q", s[i:j])
			}
			out = append(out, token{kind: tNum, text: s[i:j], num: n})
			i = j
		case isIdent(c):
			j := i
			for j < len(s) && (isIdent(s[j]) || s[j] >= '0' && s[j] <= '9' || s[j] == ':') {
				j++
			}
			out = append(out, token{kind: tIdent, text: s[i:j]})
			i = j
		case c == '"':
			v, n, err := unquote(s[i:])
			if err != nil {
				return nil, err
			}
			out = append(out, token{kind: tStr, text: v})
			i += n
		default:
			two := ""
			if i+1 < len(s) {
				two = s[i : i+2]
			}
			switch {
			case two == "==" || two == "!=" || two == ">=" || two == "<=" || two == "=~" || two == "!~":
				out = append(out, token{kind: tOp, text: two})
				i += 2
				continue
			}
			kinds := map[byte]tokKind{'(': tLParen, ')': tRParen, '{': tLBrace, '}': tRBrace, '[': tLBracket, ']': tRBracket, ',': tComma}
			if k, ok := kinds[c]; ok {
				out = append(out, token{kind: k, text: string(c)})
			} else if strings.IndexByte("+-*/<>=", c) >= 0 {
				out = append(out, token{kind: tOp, text: string(c)})
			} else {
				return nil, fmt.Errorf("unexpected %q", c)
			}
			i++
		}
	}
	return out, nil
}

func isIdent(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

type parser struct {
	toks          []token
	pos           int
	before, after Scrape
}

func (p *parser) peek() (token, bool) {
	if p.pos < len(p.toks) {
		return p.toks[p.pos], true
	}
	return token{}, false
}

func (p *parser) expect(k tokKind, what string) (token, error) {
	t, ok := p.peek()
	if !ok || t.kind != k {
		if !ok {
			return t, fmt.Errorf("%s expected at the end", what)
		}
		return t, fmt.Errorf("%s expected, not %q", what, t.text)
	}
	p.pos++
	return t, nil
}

// precedence of the binary operators, lowest first (PromQL's).
func precedence(t token) int {
	switch {
	case t.kind == tIdent && t.text == "or":
		return 1
	case t.kind == tIdent && (t.text == "and" || t.text == "unless"):
		return 2
	case t.kind != tOp:
		return 0
	case t.text == "==" || t.text == "!=" || t.text == ">" || t.text == "<" || t.text == ">=" || t.text == "<=":
		return 3
	case t.text == "+" || t.text == "-":
		return 4
	case t.text == "*" || t.text == "/":
		return 5
	}
	return 0
}

// expr parses operators binding tighter than minPrec (precedence climbing, left-associative).
func (p *parser) expr(minPrec int) (value, error) {
	lhs, err := p.unary()
	if err != nil {
		return value{}, err
	}
	for {
		t, ok := p.peek()
		prec := precedence(t)
		if !ok || prec == 0 || prec <= minPrec {
			return lhs, nil
		}
		p.pos++
		if t.kind == tIdent && t.text == "unless" {
			return value{}, fmt.Errorf("unless is not supported")
		}
		rhs, err := p.expr(prec)
		if err != nil {
			return value{}, err
		}
		if lhs, err = binary(t.text, lhs, rhs); err != nil {
			return value{}, err
		}
	}
}

func (p *parser) unary() (value, error) {
	if t, ok := p.peek(); ok && t.kind == tOp && t.text == "-" {
		p.pos++
		v, err := p.unary()
		if err != nil {
			return value{}, err
		}
		return binary("*", value{scalar: true, s: -1}, v)
	}
	return p.primary()
}

var aggregations = map[string]func(acc float64, n int, v float64) float64{
	"sum": func(acc float64, _ int, v float64) float64 { return acc + v },
	"max": func(acc float64, n int, v float64) float64 {
		if n == 0 {
			return v
		}
		return math.Max(acc, v)
	},
	"min": func(acc float64, n int, v float64) float64 {
		if n == 0 {
			return v
		}
		return math.Min(acc, v)
	},
}

func (p *parser) primary() (value, error) {
	t, ok := p.peek()
	if !ok {
		return value{}, fmt.Errorf("expression ends early")
	}
	switch t.kind {
	case tNum:
		p.pos++
		return value{scalar: true, s: t.num}, nil
	case tLParen:
		p.pos++
		v, err := p.expr(0)
		if err != nil {
			return value{}, err
		}
		_, err = p.expect(tRParen, ")")
		return v, err
	case tIdent:
		p.pos++
		if agg, ok := aggregations[t.text]; ok {
			return p.aggregation(agg)
		}
		if next, ok := p.peek(); ok && next.kind == tLParen {
			return p.call(t.text)
		}
		return p.selector(t.text, p.after)
	}
	return value{}, fmt.Errorf("unexpected %q", t.text)
}

// aggregation parses `by (l, ...) (expr)`, `(expr) by (l, ...)` or `(expr)`.
func (p *parser) aggregation(agg func(float64, int, float64) float64) (value, error) {
	var by []string
	var err error
	if t, ok := p.peek(); ok && t.kind == tIdent && t.text == "by" {
		if by, err = p.labelList(); err != nil {
			return value{}, err
		}
	}
	if _, err := p.expect(tLParen, "("); err != nil {
		return value{}, err
	}
	in, err := p.expr(0)
	if err != nil {
		return value{}, err
	}
	if _, err := p.expect(tRParen, ")"); err != nil {
		return value{}, err
	}
	if t, ok := p.peek(); ok && t.kind == tIdent && t.text == "by" && by == nil {
		if by, err = p.labelList(); err != nil {
			return value{}, err
		}
	}
	if in.scalar {
		return value{}, fmt.Errorf("aggregation over a scalar")
	}
	groups := map[string]*Sample{}
	counts := map[string]int{}
	var order []string
	for _, s := range in.v {
		labels := map[string]string{}
		for _, l := range by {
			if v, ok := s.Labels[l]; ok {
				labels[l] = v
			}
		}
		k := key(labels)
		g, ok := groups[k]
		if !ok {
			g = &Sample{Labels: labels}
			groups[k] = g
			order = append(order, k)
		}
		g.Value = agg(g.Value, counts[k], s.Value)
		counts[k]++
	}
	out := value{}
	for _, k := range order {
		out.v = append(out.v, *groups[k])
	}
	return out, nil
}

func (p *parser) labelList() ([]string, error) {
	p.pos++ // by
	if _, err := p.expect(tLParen, "( after by"); err != nil {
		return nil, err
	}
	labels := []string{}
	for {
		t, err := p.expect(tIdent, "a label")
		if err != nil {
			return nil, err
		}
		labels = append(labels, t.text)
		if n, ok := p.peek(); ok && n.kind == tComma {
			p.pos++
			continue
		}
		_, err = p.expect(tRParen, ")")
		return labels, err
	}
}

func (p *parser) call(name string) (value, error) {
	p.pos++ // (
	switch name {
	case "rate", "increase":
		id, err := p.expect(tIdent, "a metric")
		if err != nil {
			return value{}, err
		}
		start := p.pos
		after, err := p.selector(id.text, p.after)
		if err != nil {
			return value{}, err
		}
		p.pos = start // the same selector, in the earlier scrape
		before, err := p.selector(id.text, p.before)
		if err != nil {
			return value{}, err
		}
		if _, err := p.expect(tLBracket, "a range"); err != nil {
			return value{}, err
		}
		if _, err := p.expect(tIdent, "a range's duration"); err != nil {
			return value{}, err
		}
		if _, err := p.expect(tRBracket, "]"); err != nil {
			return value{}, err
		}
		if _, err := p.expect(tRParen, ")"); err != nil {
			return value{}, err
		}
		dt := p.after.At.Sub(p.before.At).Seconds()
		prev := map[string]float64{}
		for _, s := range before.v {
			prev[key(s.Labels)] = s.Value
		}
		out := value{}
		for _, s := range after.v {
			b, ok := prev[key(s.Labels)]
			if !ok {
				b = 0 // a series born between the scrapes started from zero
			}
			d := s.Value - b
			if d < 0 { // a counter reset: the process restarted
				d = s.Value
			}
			if name == "rate" {
				d /= dt
			}
			out.v = append(out.v, Sample{Labels: s.Labels, Value: d})
		}
		return out, nil
	case "clamp_min":
		v, err := p.expr(0)
		if err != nil {
			return value{}, err
		}
		if _, err := p.expect(tComma, ","); err != nil {
			return value{}, err
		}
		lo, err := p.expr(0)
		if err != nil {
			return value{}, err
		}
		if _, err := p.expect(tRParen, ")"); err != nil {
			return value{}, err
		}
		if !lo.scalar || v.scalar {
			return value{}, fmt.Errorf("clamp_min(vector, scalar)")
		}
		out := value{}
		for _, s := range v.v {
			out.v = append(out.v, Sample{Labels: s.Labels, Value: math.Max(s.Value, lo.s)})
		}
		return out, nil
	}
	return value{}, fmt.Errorf("function %s is not supported", name)
}

// selector reads `{l="v", ...}` after a metric's name and picks its series from the scrape.
func (p *parser) selector(name string, from Scrape) (value, error) {
	type matcher struct {
		label, op, val string
	}
	var ms []matcher
	if t, ok := p.peek(); ok && t.kind == tLBrace {
		p.pos++
		for {
			if t, ok := p.peek(); ok && t.kind == tRBrace {
				p.pos++
				break
			}
			l, err := p.expect(tIdent, "a label")
			if err != nil {
				return value{}, err
			}
			op, ok := p.peek()
			if !ok || op.kind != tOp || op.text != "=" && op.text != "!=" {
				return value{}, fmt.Errorf("label %s: only = and != are supported", l.text)
			}
			p.pos++
			v, err := p.expect(tStr, "a quoted value")
			if err != nil {
				return value{}, err
			}
			ms = append(ms, matcher{l.text, op.text, v.text})
			if t, ok := p.peek(); ok && t.kind == tComma {
				p.pos++
			}
		}
	}
	out := value{}
	for _, s := range from.Series {
		if s.Name != name {
			continue
		}
		match := true
		for _, m := range ms {
			if (s.Labels[m.label] == m.val) != (m.op == "=") {
				match = false
				break
			}
		}
		if match {
			out.v = append(out.v, Sample{Labels: s.Labels, Value: s.Value})
		}
	}
	return out, nil
}

func key(labels map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		fmt.Fprintf(&b, "%s=%q,", k, labels[k])
	}
	return b.String()
}

func apply(op string, a, b float64) (float64, bool, error) {
	switch op {
	case "+":
		return a + b, true, nil
	case "-":
		return a - b, true, nil
	case "*":
		return a * b, true, nil
	case "/":
		return a / b, true, nil
	case "==":
		return a, a == b, nil
	case "!=":
		return a, a != b, nil
	case ">":
		return a, a > b, nil
	case "<":
		return a, a < b, nil
	case ">=":
		return a, a >= b, nil
	case "<=":
		return a, a <= b, nil
	}
	return 0, false, fmt.Errorf("operator %s is not supported", op)
}

func comparison(op string) bool { return precedence(token{kind: tOp, text: op}) == 3 }

// binary applies op. Arithmetic keeps every sample; a comparison keeps those for which it
// holds, with the left side's value (PromQL without bool); vector with vector matches samples
// of the same labels, one to one.
func binary(op string, l, r value) (value, error) {
	switch op {
	case "and", "or":
		if l.scalar || r.scalar {
			return value{}, fmt.Errorf("%s between scalars", op)
		}
		right := map[string]bool{}
		for _, s := range r.v {
			right[key(s.Labels)] = true
		}
		out := value{}
		if op == "and" {
			for _, s := range l.v {
				if right[key(s.Labels)] {
					out.v = append(out.v, s)
				}
			}
			return out, nil
		}
		left := map[string]bool{}
		out.v = append(out.v, l.v...)
		for _, s := range l.v {
			left[key(s.Labels)] = true
		}
		for _, s := range r.v {
			if !left[key(s.Labels)] {
				out.v = append(out.v, s)
			}
		}
		return out, nil
	}
	if l.scalar && r.scalar {
		if comparison(op) {
			return value{}, fmt.Errorf("a comparison of two scalars needs bool, which is not supported")
		}
		v, _, err := apply(op, l.s, r.s)
		return value{scalar: true, s: v}, err
	}
	out := value{}
	if l.scalar || r.scalar {
		vec, sc, scalarLeft := l.v, r.s, false
		if l.scalar {
			vec, sc, scalarLeft = r.v, l.s, true
		}
		for _, s := range vec {
			a, b := s.Value, sc
			if scalarLeft {
				a, b = sc, s.Value
			}
			v, keep, err := apply(op, a, b)
			if err != nil {
				return value{}, err
			}
			if comparison(op) {
				if keep {
					out.v = append(out.v, Sample{Labels: s.Labels, Value: s.Value})
				}
				continue
			}
			out.v = append(out.v, Sample{Labels: s.Labels, Value: v})
		}
		return out, nil
	}
	right := map[string]float64{}
	for _, s := range r.v {
		k := key(s.Labels)
		if _, dup := right[k]; dup {
			return value{}, fmt.Errorf("many-to-one matching of %s is not supported (%s)", op, k)
		}
		right[k] = s.Value
	}
	for _, s := range l.v {
		b, ok := right[key(s.Labels)]
		if !ok {
			continue
		}
		v, keep, err := apply(op, s.Value, b)
		if err != nil {
			return value{}, err
		}
		if comparison(op) && !keep {
			continue
		}
		out.v = append(out.v, Sample{Labels: s.Labels, Value: v})
	}
	return out, nil
}

// Alert is one row of an alert table: its name, PromQL expression and "for" clause.
type Alert struct {
	Name, Expr, For string
}

// AlertTable reads the Markdown table that follows the heading in md (the user guide's
// "### Alerts"): rows of | name | `expression` | for | why |.
func AlertTable(md []byte, heading string) ([]Alert, error) {
	text := string(md)
	i := strings.Index(text, "\n"+heading+"\n")
	if i < 0 {
		return nil, fmt.Errorf("promalert: no heading %q", heading)
	}
	var out []Alert
	inTable := false
	for _, l := range strings.Split(text[i+len(heading)+2:], "\n") {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "|") {
			if inTable {
				break
			}
			if strings.HasPrefix(l, "#") {
				break
			}
			continue
		}
		inTable = true
		cells := splitRow(l)
		if len(cells) < 3 || cells[0] == "alert" || strings.Trim(cells[0], "-: ") == "" {
			continue
		}
		expr := cells[1]
		if len(expr) < 2 || expr[0] != '`' || expr[len(expr)-1] != '`' {
			return nil, fmt.Errorf("promalert: alert %q: the expression is not in backquotes: %q", cells[0], expr)
		}
		out = append(out, Alert{Name: cells[0], Expr: strings.ReplaceAll(expr[1:len(expr)-1], `\|`, "|"), For: cells[2]})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("promalert: no alert rows under %q", heading)
	}
	return out, nil
}

// splitRow cuts a Markdown table row into its cells, keeping escaped bars (\|) inside cells.
func splitRow(l string) []string {
	l = strings.TrimSuffix(strings.TrimPrefix(l, "|"), "|")
	var cells []string
	var b strings.Builder
	for i := 0; i < len(l); i++ {
		if l[i] == '\\' && i+1 < len(l) && l[i+1] == '|' {
			b.WriteString(`\|`)
			i++
			continue
		}
		if l[i] == '|' {
			cells = append(cells, strings.TrimSpace(b.String()))
			b.Reset()
			continue
		}
		b.WriteByte(l[i])
	}
	return append(cells, strings.TrimSpace(b.String()))
}

// Firing evaluates every alert over the two scrapes and returns the names of those that fire.
func Firing(alerts []Alert, before, after Scrape) ([]string, error) {
	var names []string
	for _, a := range alerts {
		fires, err := Fires(a.Expr, before, after)
		if err != nil {
			return nil, fmt.Errorf("alert %q: %w", a.Name, err)
		}
		if fires {
			names = append(names, a.Name)
		}
	}
	return names, nil
}
