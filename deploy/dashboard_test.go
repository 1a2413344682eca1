package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

const dashboardFile = "grafana/crem-gateway.json"

// promqlWords are PromQL's functions, aggregation operators and keywords: never metric names.
var promqlWords = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`sum min max avg group stddev stdvar count count_values bottomk topk quantile limitk
		limit_ratio by without on ignoring group_left group_right bool offset and or unless atan2 inf nan start end
		abs absent absent_over_time ceil changes clamp clamp_max clamp_min day_of_month day_of_week day_of_year
		days_in_month delta deriv exp floor histogram_avg histogram_count histogram_fraction histogram_quantile
		histogram_stddev histogram_stdvar histogram_sum holt_winters double_exponential_smoothing hour idelta
		increase irate label_join label_replace ln log2 log10 minute month predict_linear rate resets round scalar
		sgn sort sort_desc sort_by_label sort_by_label_desc sqrt time timestamp vector year avg_over_time
		min_over_time max_over_time sum_over_time count_over_time quantile_over_time stddev_over_time
		stdvar_over_time last_over_time present_over_time mad_over_time acos acosh asin asinh atan atanh cos cosh
		sin sinh tan tanh deg rad pi info`) {
		promqlWords[w] = true
	}
}

// labelLists are the keywords followed by a parenthesised list of label names.
var labelLists = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}
func isIdent(c byte) bool { return isIdentStart(c) || (c >= '0' && c <= '9') }

// skipQuoted returns the index after the string literal starting at i.
func skipQuoted(e string, i int) (int, error) {
	q := e[i]
	for j := i + 1; j < len(e); j++ {
		switch {
		case e[j] == '\\' && q != '`':
			j++
		case e[j] == q:
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("unterminated string at %d", i)
}

// skipTo returns the index after the close that matches the open at i, strings skipped.
func skipTo(e string, i int, open, close byte) (int, error) {
	depth := 0
	for j := i; j < len(e); j++ {
		switch c := e[j]; {
		case c == '"' || c == '\'' || c == '`':
			k, err := skipQuoted(e, j)
			if err != nil {
				return 0, err
			}
			j = k - 1
		case c == open:
			depth++
		case c == close:
			if depth--; depth == 0 {
				return j + 1, nil
			}
		}
	}
	return 0, fmt.Errorf("unbalanced %c at %d", open, i)
}

// metricNames returns the metric names a PromQL expression (with Grafana's $variables) names:
// the identifiers outside label matchers, ranges, strings and label lists that are no function
// or keyword. An identifier followed by "(" that is no function is an error.
func metricNames(e string) ([]string, error) {
	var names []string
	for i := 0; i < len(e); {
		c := e[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			j, err := skipQuoted(e, i)
			if err != nil {
				return nil, err
			}
			i = j
		case c == '{':
			j, err := skipTo(e, i, '{', '}')
			if err != nil {
				return nil, err
			}
			i = j
		case c == '[':
			j, err := skipTo(e, i, '[', ']')
			if err != nil {
				return nil, err
			}
			i = j
		case c == '$': // $var, ${var}, $__rate_interval
			i++
			if i < len(e) && e[i] == '{' {
				j, err := skipTo(e, i, '{', '}')
				if err != nil {
					return nil, err
				}
				i = j
			}
			for i < len(e) && isIdent(e[i]) {
				i++
			}
		case c >= '0' && c <= '9' || (c == '.' && i+1 < len(e) && e[i+1] >= '0' && e[i+1] <= '9'):
			// A number or a duration: 1e-9, 0x1f, 5m, 1h30m.
			for i < len(e) && (isIdent(e[i]) || e[i] == '.' || ((e[i] == '-' || e[i] == '+') && (e[i-1] == 'e' || e[i-1] == 'E'))) {
				i++
			}
		case isIdentStart(c):
			j := i
			for j < len(e) && isIdent(e[j]) {
				j++
			}
			w := e[i:j]
			k := j
			for k < len(e) && (e[k] == ' ' || e[k] == '\t' || e[k] == '\n') {
				k++
			}
			switch {
			case labelLists[w] && k < len(e) && e[k] == '(':
				end, err := skipTo(e, k, '(', ')')
				if err != nil {
					return nil, err
				}
				j = end
			case promqlWords[w]:
			case k < len(e) && e[k] == '(':
				return nil, fmt.Errorf("%s(: no PromQL function of that name", w)
			default:
				names = append(names, w)
			}
			i = j
		default:
			i++
		}
	}
	return names, nil
}

// queries returns every PromQL expression of a Grafana dashboard: the targets' expr and the
// query variables' queries (label_values(METRIC, label) names METRIC), with where they are.
func queries(dash []byte) (map[string]string, error) {
	var d map[string]any
	if err := json.Unmarshal(dash, &d); err != nil {
		return nil, err
	}
	out := map[string]string{}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			where := path
			if t, ok := x["title"].(string); ok {
				where = path + "/" + t
			}
			for k, c := range x {
				if k == "expr" {
					if s, ok := c.(string); ok {
						out[where+"/"+fmt.Sprint(x["refId"])] = s
					}
					continue
				}
				walk(where, c)
			}
		case []any:
			for _, c := range x {
				walk(path, c)
			}
		}
	}
	walk("", d["panels"])
	tpl, _ := d["templating"].(map[string]any)
	vars, _ := tpl["list"].([]any)
	for _, v := range vars {
		m, _ := v.(map[string]any)
		if m["type"] != "query" {
			continue
		}
		q, _ := m["query"].(string)
		if qm, ok := m["query"].(map[string]any); ok {
			q, _ = qm["query"].(string)
		}
		if a, ok := strings.CutPrefix(q, "label_values("); ok {
			if metric, _, ok := strings.Cut(a, ","); ok {
				q = strings.TrimSpace(metric) // label_values(METRIC, label)
			} else {
				q = "" // label_values(label): no metric
			}
		}
		out[fmt.Sprintf("templating/%v", m["name"])] = q
	}
	return out, nil
}

// checkDashboard returns a line for every expression that does not parse or names a metric not
// in exported, and the metric names it checked.
func checkDashboard(dash []byte, exported map[string]bool) (problems []string, checked map[string]bool) {
	qs, err := queries(dash)
	if err != nil {
		return []string{err.Error()}, nil
	}
	checked = map[string]bool{}
	for where, q := range qs {
		names, err := metricNames(q)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %q: %v", where, q, err))
			continue
		}
		for _, n := range names {
			checked[n] = true
			if !exported[n] {
				problems = append(problems, fmt.Sprintf("%s: %s is not exported by the gateway", where, n))
			}
		}
	}
	slices.Sort(problems)
	return problems, checked
}

// TestMetricNames: the PromQL reader finds metric names and nothing else.
func TestMetricNames(t *testing.T) {
	for e, want := range map[string][]string{
		`sum by (reason) (rate(a_total{x="y(z)",w=~"$i"}[$__rate_interval])) / on(instance) group_left(foo) b offset 5m > bool 1e-9`: {"a_total", "b"},
		`topk(10, rate(c{instance=~"${instance}"}[5m]) + rate(d[1h30m])) > 0`:                                                        {"c", "d"},
		`label_replace(up, "dst", "$1", "src", "(.*)") or vector(0) * 0x1f`:                                                          {"up"},
		`histogram_quantile(0.99, sum without (instance) (rate(h_bucket[5m])))`:                                                      {"h_bucket"},
		`1 - (sum(x) / clamp_min(sum(y), 1e-9))`:                                                                                     {"x", "y"},
	} {
		got, err := metricNames(e)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("%s: got %q %v, want %q", e, got, err, want)
		}
	}
	for _, e := range []string{`raet(x[5m])`, `sum(x{a="b}`, `rate(x[5m)`} {
		if _, err := metricNames(e); err == nil {
			t.Errorf("%s: no error", e)
		}
	}
}

// TestDashboardMetricsExported: every PromQL expression of the Grafana dashboard names only
// metrics a live gateway exports: a relay pair on loopback carries one protected flow (so that
// the per-flow series of both halves exist) and both /metrics are scraped. A misspelt metric,
// a metric the gateway renamed or a histogram suffix on a summary fails the test, as the
// deliberately wrong expressions below show; and the dashboard shows each thing an operator
// watches.
func TestDashboardMetricsExported(t *testing.T) {
	dash, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	a, b := livePair(t)
	names := map[string]bool{}
	for _, text := range []string{a, b} {
		n, err := exported(text)
		if err != nil {
			t.Fatal(err)
		}
		for k := range n {
			names[k] = true
		}
	}
	problems, checked := checkDashboard(dash, names)
	for _, p := range problems {
		t.Error(p)
	}
	if len(checked) < 100 {
		t.Errorf("the dashboard names %d metrics, want its 100 and more", len(checked))
	}
	for _, m := range []string{"crem_gateway_flows", "crem_gateway_live_flows", "crem_gateway_csf_sessions", "crem_gateway_crf_pending_sessions",
		"crem_csf_sources_total", "crem_csf_sources_unprotected_total", "crem_gateway_packets_protected_total", "crem_gateway_packets_unprotected_total",
		"crem_csf_repair_sent_total", "crem_csf_retx_sent_total", "crem_crf_flows_restored_total", "crem_csf_requests_received_total",
		"crem_crf_flows_requests_total", "crem_crf_flows_icrc_mismatch_total", "crem_csf_breaker_trips_total", "crem_csf_repair_skipped_breaker_total",
		"crem_gateway_socket_drops_total", "crem_gateway_packets_total", "crem_gateway_crem_dropped_total", "crem_gateway_buffer_bytes", "crem_gateway_buffers_held",
		"crem_gateway_crf_bytes", "process_resident_memory_bytes", "crem_csf_path_reports_total", "crem_csf_path_reports_rejected_total",
		"crem_csf_flow_source_rate", "crem_crf_flow_source_rate", "crem_csf_flow_state", "crem_crf_flow_restored_total",
		"crem_csf_flow_block_sources", "crem_csf_flow_block_repair", "crem_csf_flow_loss_ratio", "crem_csf_flow_srtt_seconds",
		"crem_csf_flow_breaker_state", "crem_build_info", "crem_pairing_unpaired_total", "crem_csf_path_reports_rejected_total"} {
		if !checked[m] {
			t.Errorf("the dashboard does not show %s", m)
		}
	}

	// Wrong on purpose: each must be caught.
	for _, c := range []struct{ name, from, to, want string }{
		{"a metric renamed in the JSON", "crem_csf_repair_sent_total", "crem_csf_repair_snet_total", "crem_csf_repair_snet_total is not exported"},
		{"a name from before the socket became a label", "crem_gateway_packets_total", "crem_gateway_rx_packets_crem_total", "crem_gateway_rx_packets_crem_total is not exported"},
		{"a name from before the direction became a label", "crem_gateway_packets_total", "crem_gateway_rx_packets_total", "crem_gateway_rx_packets_total is not exported"},
		{"a gauge given _total", "crem_gateway_buffer_bytes", "crem_gateway_buffer_bytes_total", "crem_gateway_buffer_bytes_total is not exported"},
		{"a misspelt function", "topk(10, crem_csf_flow_source_rate", "topk(10, raet(crem_csf_flow_source_rate", "raet(: no PromQL function"},
		{"a renamed variable query", "label_values(crem_gateway_flows,", "label_values(crem_gateway_flow,", "templating/instance: crem_gateway_flow is not"},
	} {
		bad := strings.Replace(string(dash), c.from, c.to, 1)
		if bad == string(dash) {
			t.Fatalf("%s: the dashboard has no %q to change", c.name, c.from)
		}
		problems, _ := checkDashboard([]byte(bad), names)
		if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, c.want) }) {
			t.Errorf("%s: not caught: %q", c.name, problems)
		}
	}
	// Histogram and summary series: a summary has _sum and _count, no _bucket.
	for e, ok := range map[string]bool{
		`rate(go_gc_duration_seconds_count[5m])`: true, `rate(go_gc_duration_seconds_sum[5m])`: true,
		`histogram_quantile(0.9, rate(go_gc_duration_seconds_bucket[5m]))`: false,
	} {
		d, _ := json.Marshal(map[string]any{"panels": []any{map[string]any{"title": "t", "targets": []any{map[string]any{"refId": "A", "expr": e}}}}})
		if problems, _ := checkDashboard(d, names); (len(problems) == 0) != ok {
			t.Errorf("%s: problems %q, want ok=%v", e, problems, ok)
		}
	}
}

// TestDashboardShape: the dashboard imports as Grafana expects: a uid, unique panel ids, panels
// within the 24 columns, every target with a data source and a refId unique in its panel, and
// the instance variable.
func TestDashboardShape(t *testing.T) {
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID, Title    string
		SchemaVersion int
		Panels        []struct {
			ID         int
			Type       string
			Title      string
			GridPos    struct{ H, W, X, Y int }
			Datasource map[string]string
			Targets    []struct {
				Expr       string
				RefID      string
				Datasource map[string]string
			}
		}
		Templating struct{ List []struct{ Name, Type string } }
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || d.Title == "" || d.SchemaVersion < 30 {
		t.Errorf("uid %q title %q schemaVersion %d", d.UID, d.Title, d.SchemaVersion)
	}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if g := p.GridPos; g.W < 1 || g.X < 0 || g.X+g.W > 24 || g.H < 1 {
			t.Errorf("%s: gridPos %+v", p.Title, g)
		}
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 || p.Datasource["uid"] != "${datasource}" {
			t.Errorf("%s: %d targets, data source %v", p.Title, len(p.Targets), p.Datasource)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if tg.RefID == "" || refs[tg.RefID] || tg.Expr == "" || tg.Datasource["uid"] != "${datasource}" {
				t.Errorf("%s: target %+v", p.Title, tg)
			}
			refs[tg.RefID] = true
		}
	}
	var vars []string
	for _, v := range d.Templating.List {
		vars = append(vars, v.Name+":"+v.Type)
	}
	if !slices.Contains(vars, "datasource:datasource") || !slices.Contains(vars, "instance:query") {
		t.Errorf("variables %q", vars)
	}
}
