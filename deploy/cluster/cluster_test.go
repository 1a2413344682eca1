package cluster

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// line is a YAML line without its comment: its indentation and its text.
type line struct {
	indent int
	text   string
}

// parseYAML reads the subset of YAML the examples use: documents separated by ---, block
// mappings and sequences, plain, quoted and JSON flow scalars. Enough to check the examples
// without a YAML library.
func parseYAML(t *testing.T, src string) []any {
	t.Helper()
	var docs []any
	var cur []line
	flush := func() {
		if len(cur) > 0 {
			v, next := block(t, cur, 0, cur[0].indent)
			if next != len(cur) {
				t.Fatalf("yaml: line %q not parsed", cur[next].text)
			}
			docs = append(docs, v)
		}
		cur = nil
	}
	for _, raw := range strings.Split(src, "\n") {
		text := stripComment(raw)
		if strings.TrimSpace(text) == "" {
			continue
		}
		if text == "---" {
			flush()
			continue
		}
		trimmed := strings.TrimLeft(text, " ")
		cur = append(cur, line{len(text) - len(trimmed), strings.TrimRight(trimmed, " ")})
	}
	flush()
	return docs
}

func stripComment(s string) string {
	quote := byte(0)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '#' && (i == 0 || s[i-1] == ' '):
			return s[:i]
		}
	}
	return s
}

// block parses the mapping or sequence starting at ls[i] with the given indentation.
func block(t *testing.T, ls []line, i, indent int) (any, int) {
	if strings.HasPrefix(ls[i].text, "- ") || ls[i].text == "-" {
		var seq []any
		for i < len(ls) && ls[i].indent == indent && (strings.HasPrefix(ls[i].text, "- ") || ls[i].text == "-") {
			rest := strings.TrimSpace(strings.TrimPrefix(ls[i].text, "-"))
			switch {
			case rest == "":
				v, next := block(t, ls, i+1, ls[i+1].indent)
				seq, i = append(seq, v), next
			case isKey(rest):
				ls[i] = line{indent + 2, rest} // "- key: v" opens a mapping at indent + 2
				v, next := block(t, ls, i, indent+2)
				seq, i = append(seq, v), next
			default:
				seq, i = append(seq, scalar(t, rest)), i+1
			}
		}
		return seq, i
	}
	m := map[string]any{}
	for i < len(ls) && ls[i].indent == indent && !strings.HasPrefix(ls[i].text, "- ") {
		if !isKey(ls[i].text) {
			t.Fatalf("yaml: %q is not key: value", ls[i].text)
		}
		k, v, _ := strings.Cut(ls[i].text, ":")
		v = strings.TrimSpace(v)
		if v != "" {
			m[k], i = scalar(t, v), i+1
			continue
		}
		if i+1 < len(ls) && (ls[i+1].indent > indent || ls[i+1].indent == indent && strings.HasPrefix(ls[i+1].text, "- ")) {
			m[k], i = block(t, ls, i+1, ls[i+1].indent)
		} else {
			m[k], i = nil, i+1
		}
	}
	return m, i
}

var keyRE = regexp.MustCompile(`^[A-Za-z0-9_.-]+:( |$)`)

func isKey(s string) bool { return keyRE.MatchString(s) }

func scalar(t *testing.T, s string) any {
	switch {
	case strings.HasPrefix(s, "[") || strings.HasPrefix(s, "{") || strings.HasPrefix(s, `"`):
		var v any
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			t.Fatalf("yaml: %s: %v", s, err)
		}
		return normalize(v)
	case strings.HasPrefix(s, "'"):
		return strings.Trim(s, "'")
	}
	if n, err := strconv.Atoi(s); err == nil {
		return n
	}
	return s
}

// normalize turns JSON's float64 integers into int, as plain scalars are.
func normalize(v any) any {
	switch x := v.(type) {
	case float64:
		if x == float64(int(x)) {
			return int(x)
		}
	case []any:
		for i := range x {
			x[i] = normalize(x[i])
		}
	}
	return v
}

// get walks a parsed document along keys (strings for mappings, ints for sequences).
func get(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("%v: not a mapping at %q", path, k)
			}
			v = m[k]
		case int:
			s, ok := v.([]any)
			if !ok || k >= len(s) {
				t.Fatalf("%v: no item %d", path, k)
			}
			v = s[k]
		}
	}
	return v
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// byKind returns the documents of a kind.
func byKind(docs []any, kind string) []map[string]any {
	var out []map[string]any
	for _, d := range docs {
		if m, ok := d.(map[string]any); ok && m["kind"] == kind {
			out = append(out, m)
		}
	}
	return out
}

// flagValue returns the value after flag in args ("" when absent).
func flagValue(args []string, flag string) string {
	if i := slices.Index(args, flag); i >= 0 && i+1 < len(args) {
		return args[i+1]
	}
	return ""
}

func strs(t *testing.T, v any) []string {
	t.Helper()
	s, ok := v.([]any)
	if !ok {
		t.Fatalf("%v is not a sequence", v)
	}
	var out []string
	for _, x := range s {
		out = append(out, fmt.Sprint(x))
	}
	return out
}

// shardCount reads N from --shard auto/N.
func shardCount(t *testing.T, spec string) int {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimPrefix(spec, "auto/"))
	if !strings.HasPrefix(spec, "auto/") || err != nil || n < 1 {
		t.Fatalf("--shard %q: want auto/N", spec)
	}
	return n
}

// rulesFor returns the actions of the pod failure policy's rules on an exit code.
func rulesFor(t *testing.T, job map[string]any, container string, code int) []string {
	var actions []string
	for _, r := range get(t, job, "spec", "podFailurePolicy", "rules").([]any) {
		on, ok := r.(map[string]any)["onExitCodes"].(map[string]any)
		if !ok {
			continue
		}
		if c, ok := on["containerName"]; ok && c != container {
			continue
		}
		vals := strs(t, on["values"])
		in := slices.Contains(vals, strconv.Itoa(code))
		if on["operator"] == "NotIn" {
			in = !in
		}
		if in {
			actions = append(actions, fmt.Sprint(r.(map[string]any)["action"]))
		}
	}
	return actions
}

// volumeClaim returns the claim behind the mount of path in the pod template.
func volumeClaim(t *testing.T, job map[string]any, path string) string {
	pod := get(t, job, "spec", "template", "spec")
	vol := ""
	for _, m := range get(t, pod, "containers", 0, "volumeMounts").([]any) {
		if mm := m.(map[string]any); mm["mountPath"] == path {
			vol = fmt.Sprint(mm["name"])
		}
	}
	for _, v := range get(t, pod, "volumes").([]any) {
		if vm := v.(map[string]any); vm["name"] == vol {
			return fmt.Sprint(get(t, vm, "persistentVolumeClaim", "claimName"))
		}
	}
	t.Fatalf("%s: no volume mounted at %s", get(t, job, "metadata", "name"), path)
	return ""
}

// The Indexed Job runs crem sim with --shard auto/N for completions N, parallelism at most N,
// restartPolicy Never; a bad configuration (exit 2) fails the Job and is never retried, a
// failed trial (exit 3) fails its index only (backoffLimitPerIndex set); the shards write into
// a ReadWriteMany claim defined beside the Job, and the merge Job reads that claim's folder.
func TestIndexedJobShardCount(t *testing.T) {
	docs := parseYAML(t, readFile(t, "crem-sim-indexed-job.yaml"))
	jobs, pvcs := byKind(docs, "Job"), byKind(docs, "PersistentVolumeClaim")
	if len(jobs) != 1 || len(pvcs) != 1 {
		t.Fatalf("%d Jobs and %d claims, want one each", len(jobs), len(pvcs))
	}
	job := jobs[0]
	spec := get(t, job, "spec").(map[string]any)
	container := get(t, spec, "template", "spec", "containers", 0).(map[string]any)
	args := strs(t, container["args"])
	n := shardCount(t, flagValue(args, "--shard"))
	par, _ := spec["parallelism"].(int)
	if args[0] != "sim" || flagValue(args, "--scenario") == "" || spec["completionMode"] != "Indexed" ||
		spec["completions"] != n || par < 1 || par > n {
		t.Fatalf("args %q with completionMode %v, completions %v, parallelism %v", args, spec["completionMode"],
			spec["completions"], spec["parallelism"])
	}
	if get(t, spec, "template", "spec", "restartPolicy") != "Never" {
		t.Error("restartPolicy must be Never for podFailurePolicy")
	}
	name := fmt.Sprint(container["name"])
	if a := rulesFor(t, job, name, 2); !slices.Equal(a, []string{"FailJob"}) {
		t.Errorf("exit 2: rules %q, want FailJob alone", a)
	}
	if a := rulesFor(t, job, name, 3); !slices.Equal(a, []string{"FailIndex"}) || spec["backoffLimitPerIndex"] == nil {
		t.Errorf("exit 3: rules %q with backoffLimitPerIndex %v, want FailIndex", a, spec["backoffLimitPerIndex"])
	}
	if a := rulesFor(t, job, name, 1); len(a) != 0 {
		t.Errorf("exit 1 (results not written) should be retried: rules %q", a)
	}
	out := flagValue(args, "--out")
	claim := volumeClaim(t, job, out)
	if claim != get(t, pvcs[0], "metadata", "name") || !slices.Contains(strs(t, get(t, pvcs[0], "spec", "accessModes")), "ReadWriteMany") {
		t.Errorf("--out %s on claim %q; defined: %v", out, claim, pvcs[0])
	}

	mdocs := parseYAML(t, readFile(t, "crem-sim-merge-job.yaml"))
	mjobs := byKind(mdocs, "Job")
	if len(mjobs) != 1 {
		t.Fatalf("%d merge Jobs", len(mjobs))
	}
	mc := get(t, mjobs[0], "spec", "template", "spec", "containers", 0).(map[string]any)
	margs := strs(t, mc["args"])
	if len(margs) < 3 || margs[0] != "sim" || margs[1] != "merge" || margs[len(margs)-1] != out ||
		volumeClaim(t, mjobs[0], out) != claim || strings.HasPrefix(flagValue(margs, "--out"), out+"/shard-") {
		t.Errorf("merge args %q: want sim merge ... %s on claim %s", margs, out, claim)
	}
	if a := rulesFor(t, mjobs[0], fmt.Sprint(mc["name"]), 2); !slices.Equal(a, []string{"FailJob"}) {
		t.Errorf("merge exit 2: rules %q, want FailJob", a)
	}
	if c := mc["command"]; !slices.Equal(strs(t, c), strs(t, container["command"])) {
		t.Errorf("merge runs %v, the shards %v", c, container["command"])
	}
}

// The Slurm array covers 0..N-1 for the --shard auto/N of its crem line (no --shard-base: the
// array starts at 0), and its header submits the merge over the folder the tasks write.
func TestSlurmArrayShardCount(t *testing.T) {
	src := readFile(t, "crem-sim-array.sbatch")
	arr := regexp.MustCompile(`(?m)^#SBATCH --array=(\d+)-(\d+)(%\d+)?$`).FindAllStringSubmatch(src, -1)
	run := regexp.MustCompile(`(?m)^exec crem sim (.*)$`).FindAllStringSubmatch(src, -1)
	if len(arr) != 1 || len(run) != 1 {
		t.Fatalf("want one #SBATCH --array=A-B and one crem sim line: %q %q", arr, run)
	}
	args := strings.Fields(run[0][1])
	n := shardCount(t, flagValue(args, "--shard"))
	lo, _ := strconv.Atoi(arr[0][1])
	hi, _ := strconv.Atoi(arr[0][2])
	if lo != 0 || hi != n-1 || slices.Contains(args, "--shard-base") || flagValue(args, "--scenario") == "" {
		t.Fatalf("--array=%d-%d for %q, want 0-%d", lo, hi, args, n-1)
	}
	if flagValue(args, "--out") != `"$results"` ||
		!regexp.MustCompile(`(?m)^#\s+sbatch --dependency=afterok:\$jid .*\n#\s+--wrap "crem sim merge .*crem-sim-results"$`).MatchString(src) ||
		!strings.Contains(src, "results=${CREM_SIM_RESULTS:-$SLURM_SUBMIT_DIR/crem-sim-results}") {
		t.Error("the merge job must read the folder the tasks write")
	}
}

// The README shows both examples with the same N, the merge, and the exit codes.
func TestClusterReadme(t *testing.T) {
	src := readFile(t, "README.md")
	for _, want := range []string{"crem-sim-indexed-job.yaml", "crem-sim-merge-job.yaml", "crem-sim-array.sbatch",
		"--shard auto/16", "crem sim merge", "JOB_COMPLETION_INDEX", "SLURM_ARRAY_TASK_ID", "--shard-base",
		"| 2 |", "| 3 |"} {
		if !strings.Contains(src, want) {
			t.Errorf("README.md lacks %q", want)
		}
	}
}
