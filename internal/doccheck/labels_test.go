package doccheck

import (
	"bufio"
	"bytes"
	"fmt"
	"go/scanner"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// The series of labels that code and documents cite: C and T are the rulings (docs/decisions.md),
// the others the numbered protocol notes (docs/protocol-notes.md). PR comes first so that "PR3"
// is read as one label and not as P followed by something else (and CF before C).
const series = `PR|CF|C|T|E|P|R|G|S|W|K|N|U|D|F`

// citation matches a label, or a range of labels ("P5-P14", "T1-T9", "C1..C16"), whose two ends
// are checked. The second end may omit the series ("K4-7").
var citation = regexp.MustCompile(`\b(` + series + `)(\d+)\b(?:\s*(?:-|–|\.\.)\s*(` + series + `)?(\d+)\b)?`)

// definition matches where a label is defined: a heading ("### C7 ...") or a bold note at the
// start of a line ("**E42 ...").
var definition = regexp.MustCompile(`^(?:#+\s+|\*\*)((?:` + series + `)\d+)\b`)

// symbolNames matches the draft's names of source and repair symbols (S0, R0 ...), which share
// their letters with two series: a line that uses them speaks of symbols, not of notes.
var symbolNames = regexp.MustCompile(`\b[RS]0\b|\bR\d+\[`)

// notUsed starts the line of the notes' index that names the numbers no note has.
const notUsed = "Numbers not used:"

// labelDocs are the documents that define labels.
var labelDocs = []string{"docs/decisions.md", "docs/protocol-notes.md"}

// citedLabel is one label cited at a place.
type citedLabel struct {
	where string // file:line, relative to the repository's root
	label string
}

// TestCitedLabelsResolve fails when a Go comment, a document in docs/ or the README cites a
// ruling (C<n>, T<n>) or a protocol note (E<n>, P<n>, R<n>, ...) that neither docs/decisions.md
// nor docs/protocol-notes.md defines, so a citation can never point outside the repository.
func TestCitedLabelsResolve(t *testing.T) {
	root := filepath.Join("..", "..")
	defined := map[string]bool{}
	for _, doc := range labelDocs {
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(doc)))
		if err != nil {
			t.Fatalf("reading %s: %v", doc, err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if m := definition.FindStringSubmatch(line); m != nil {
				defined[m[1]] = true
			}
		}
	}
	for _, must := range []string{"C1", "C16", "T1", "T9", "E1", "P1", "R1", "G1", "S1", "K1"} {
		if !defined[must] {
			t.Fatalf("%s is not defined in %s: the label documents are not in the expected form", must, strings.Join(labelDocs, " or "))
		}
	}

	var cited []citedLabel
	docs, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	docs = append(docs, filepath.Join(root, "README.md"))
	for _, doc := range docs {
		c, err := proseCitations(root, doc)
		if err != nil {
			t.Fatal(err)
		}
		cited = append(cited, c...)
	}
	c, err := commentCitations(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(c) < 200 {
		t.Fatalf("only %d labels cited in Go comments: the scan is broken", len(c))
	}
	cited = append(cited, c...)

	for _, ci := range cited {
		if !defined[ci.label] {
			t.Errorf("%s cites %s, which neither %s defines", ci.where, ci.label, strings.Join(labelDocs, " nor "))
		}
	}
}

// labelsIn returns the labels a line of prose or comment cites; for a range, both ends.
func labelsIn(line string) []string {
	if strings.HasPrefix(strings.TrimSpace(line), notUsed) {
		return nil
	}
	symbols := symbolNames.MatchString(line)
	var out []string
	for _, at := range citation.FindAllStringSubmatchIndex(line, -1) {
		m := make([]string, len(at)/2)
		for i := range m {
			if at[2*i] >= 0 {
				m[i] = line[at[2*i]:at[2*i+1]]
			}
		}
		if symbols && (m[1] == "R" || m[1] == "S") {
			continue
		}
		if at[0] > 0 && strings.ContainsRune(":.", rune(line[at[0]-1])) {
			continue // an IPv6 address or a qualified name, not a label
		}
		out = append(out, m[1]+m[2])
		if m[4] != "" {
			s := m[3]
			if s == "" {
				s = m[1]
			}
			out = append(out, s+m[4])
		}
	}
	return out
}

// proseCitations returns the labels a Markdown document cites outside its fenced code blocks
// (which hold commands and their output, not citations).
func proseCitations(root, path string) ([]citedLabel, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	rel, _ := filepath.Rel(root, path)
	rel = filepath.ToSlash(rel)
	var out []citedLabel
	fenced := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		for _, l := range labelsIn(line) {
			out = append(out, citedLabel{rel + ":" + strconv.Itoa(n), l})
		}
	}
	return out, sc.Err()
}

// commentCitations returns the labels cited in the comments of every Go file of the repository
// (testdata and hidden directories aside).
func commentCitations(root string) ([]citedLabel, error) {
	var out []citedLabel
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("reading %s: %w", path, err)
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		fset := token.NewFileSet()
		file := fset.AddFile(rel, -1, len(src))
		var s scanner.Scanner
		s.Init(file, src, nil, scanner.ScanComments)
		for {
			pos, tok, lit := s.Scan()
			if tok == token.EOF {
				break
			}
			if tok != token.COMMENT {
				continue
			}
			first := fset.Position(pos).Line
			for i, line := range strings.Split(lit, "\n") {
				for _, l := range labelsIn(line) {
					out = append(out, citedLabel{rel + ":" + strconv.Itoa(first+i), l})
				}
			}
		}
		return nil
	})
	return out, err
}

// TestLabelsInReadsCitations pins what counts as a citation: labels, both ends of a range, and
// nothing that only looks like one.
func TestLabelsInReadsCitations(t *testing.T) {
	for _, c := range []struct {
		line string
		want string
	}{
		{"the hold is bounded (C7 a, C15)", "C7 C15"},
		{"C11 b: the bucket", "C11"},
		{"see protocol notes R38 and PR3", "R38 PR3"},
		{"the cost rule (P5-P14)", "P5 P14"},
		{"RULINGS T1..T9", "T1 T9"},
		{"K4-7", "K4 K7"},
		{"opcode 0xC2, fe80::C1, AVX-512, an S3 bucket's E2E test", "S3"},
		{"S0, S1, S2 from S3, R0, R1 (C12)", "C12"},
		{"R2[L] restores S1", ""},
		{notUsed + " E36-E39", ""},
	} {
		if got := strings.Join(labelsIn(c.line), " "); got != c.want {
			t.Errorf("labelsIn(%q) = %q, want %q", c.line, got, c.want)
		}
	}
}

// noteLabel matches a protocol note's definition, the named ones of the captures (R-ICRC) too.
var noteLabel = regexp.MustCompile(`^\*\*((?:` + series + `)\d+|R-[A-Za-z]+\d*) `)

// anchorLine is the line before a note that gives it its anchor.
var anchorLine = regexp.MustCompile(`^<a id="([a-z0-9-]+)"></a>$`)

// TestNotesIndexListsEveryNote fails when a note of docs/protocol-notes.md has no anchor of its
// own or no line in the index, or when the index points at an anchor no note has.
func TestNotesIndexListsEveryNote(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "protocol-notes.md"))
	if err != nil {
		t.Fatalf("reading the protocol notes: %v", err)
	}
	text := string(data)
	lines := strings.Split(text, "\n")
	anchors := map[string]string{}
	for i, line := range lines {
		m := noteLabel.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		a := []string(nil)
		if i > 0 {
			a = anchorLine.FindStringSubmatch(lines[i-1])
		}
		if a == nil {
			t.Errorf("docs/protocol-notes.md:%d: note %s has no anchor line before it", i+1, m[1])
			continue
		}
		if prev, ok := anchors[a[1]]; ok {
			t.Errorf("docs/protocol-notes.md:%d: anchor %q is used by %s and %s", i, a[1], prev, m[1])
		}
		anchors[a[1]] = m[1]
	}
	if len(anchors) < 200 {
		t.Fatalf("only %d notes found", len(anchors))
	}
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s*- \[([A-Za-z0-9-]+)\]\(#([a-z0-9-]+)\) `).FindAllStringSubmatch(text, -1) {
		switch label, ok := anchors[m[2]]; {
		case !ok:
			t.Errorf("the index lists %s at #%s, which no note has", m[1], m[2])
		case label != m[1]:
			t.Errorf("the index lists %s at #%s, which is note %s", m[1], m[2], label)
		}
		listed[m[2]] = true
	}
	for a, label := range anchors {
		if !listed[a] {
			t.Errorf("the index does not list note %s (#%s)", label, a)
		}
	}
	headings := map[string]bool{}
	for _, line := range lines {
		if strings.HasPrefix(line, "#") {
			headings[anchorOf(strings.TrimSpace(strings.TrimLeft(line, "#")))] = true
		}
	}
	for _, m := range regexp.MustCompile(`(?m)^\s*- \[[^\]]+\]\(#([^)]+)\)$`).FindAllStringSubmatch(text, -1) {
		if !headings[m[1]] {
			t.Errorf("the index points at #%s, which no heading has", m[1])
		}
	}
}

// TestDecisionsIndexListsEveryRuling fails when a ruling of docs/decisions.md is missing from
// the index at its top, or the index points at a heading the file does not have.
func TestDecisionsIndexListsEveryRuling(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "decisions.md"))
	if err != nil {
		t.Fatalf("reading the decisions: %v", err)
	}
	slugs := map[string]string{} // heading anchor -> the ruling it defines
	rulings := 0
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		heading := strings.TrimSpace(strings.TrimLeft(line, "#"))
		label := ""
		if m := definition.FindStringSubmatch(line); m != nil {
			label = m[1]
			rulings++
		}
		slugs[anchorOf(heading)] = label
	}
	if rulings < 25 {
		t.Fatalf("only %d rulings found", rulings)
	}
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile(`\| \[([A-Z]\d+)\]\(#([^)]+)\) \|`).FindAllStringSubmatch(string(data), -1) {
		if label, ok := slugs[m[2]]; !ok || label != m[1] {
			t.Errorf("the index lists %s at #%s, which is not its heading", m[1], m[2])
		}
		listed[m[1]] = true
	}
	for _, label := range slugs {
		if label != "" && !listed[label] {
			t.Errorf("the index does not list %s", label)
		}
	}
}

// anchorOf is the anchor a Markdown renderer (GitHub's) gives a heading: lower case, punctuation
// other than '-' and '_' dropped, spaces made '-'.
func anchorOf(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
