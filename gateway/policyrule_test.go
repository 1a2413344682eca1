package gateway

import (
	"errors"
	"strings"
	"testing"

	"github.com/crem-project/crem/policy"
)

// policy.rule chooses the draft's rule (the default) or the cost rule; policy.flow_rate and
// policy.repair_competes reach the resolved policy; a bad rule or rate is a configuration error.
func TestPolicyRuleConfig(t *testing.T) {
	r := resolveText(t, relayMinimal+"[policy]\nrule = \"cost\"\nflow_rate = \"125Mbit\"\nrepair_competes = false\n")
	if r.Policy.Rule != "cost" || r.Policy.FlowRate != "125Mbit/s" || r.Policy.RepairCompetes || r.Policy.M != 4 {
		t.Fatalf("resolved policy %+v", r.Policy)
	}
	if r := resolveText(t, relayMinimal); r.Policy.Rule != "draft" || !r.Policy.RepairCompetes || r.Policy.FlowRate != "" {
		t.Fatalf("defaults %+v", r.Policy)
	}
	for text, want := range map[string]string{
		"[policy]\nrule = \"binomial\"\n":  "policy.rule",
		"[policy]\nflow_rate = \"fast\"\n": "policy.flow_rate",
		"[policy]\nflow_rate = \"0\"\n":    "policy.flow_rate",
	} {
		c, err := ParseConfig([]byte(relayMinimal + text))
		if err == nil {
			_, err = c.Resolve()
		}
		var ce *ConfigError
		if err == nil || !strings.Contains(err.Error(), want) || !errors.As(err, &ce) {
			t.Errorf("%q: %v, want a configuration error naming %s", text, err, want)
		}
	}
}

// A flow delivered in order (a go-back-N receiver behind the CRF) keeps the draft's rule
// whatever policy.rule says: the cost rule does not price the go-back-N resend that a block it
// leaves to a coded retransmission can turn into (P13; lab.TestCREMRestoresEveryQP shows
// crem+gbn restoring nothing on a QP under the cost rule).
func TestOrderedFlowsKeepTheDraftRule(t *testing.T) {
	for _, c := range []struct {
		configured policy.Rule
		ordered    bool
		want       policy.Rule
	}{
		{policy.RuleCost, false, policy.RuleCost},
		{policy.RuleCost, true, policy.RuleDraft},
		{policy.RuleDraft, false, policy.RuleDraft},
		{policy.RuleDraft, true, policy.RuleDraft},
	} {
		if got := ruleFor(c.configured, c.ordered); got != c.want {
			t.Errorf("rule %q, ordered %v: %q, want %q", c.configured, c.ordered, got, c.want)
		}
	}
}
