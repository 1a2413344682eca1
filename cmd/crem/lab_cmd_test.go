package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestLabJSON(t *testing.T) {
	code, out, errs := runCmd("lab", "--json", "--rtt", "4ms", "--loss", "0.01", "--rate", "200Mbit", "--messages", "2", "--size", "256KiB", "--seed", "5")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var res struct {
		CREMPort int `json:"crem_port"`
		Runs     []map[string]any
	}
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(&res); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	if dec.More() {
		t.Fatalf("more than one JSON object on stdout: %q", out)
	}
	if res.CREMPort < 49152 || len(res.Runs) != 4 {
		t.Fatalf("%+v", res)
	}
	for _, r := range res.Runs {
		for _, k := range []string{"name", "verified", "messages", "bytes", "mean_s", "max_s", "goodput_bps", "lost", "restored", "coded_retx", "rdma_retx", "overhead"} {
			if _, ok := r[k]; !ok {
				t.Errorf("run lacks %s: %v", k, r)
			}
		}
		if r["verified"] != true {
			t.Errorf("%v", r)
		}
	}
}

func TestLabTableAndUsage(t *testing.T) {
	code, out, errs := runCmd("lab", "--rtt", "2ms", "--loss", "0", "--messages", "1", "--size", "64KiB", "--runs", "tcaeth,crem+tcaeth")
	if code != 0 || !strings.Contains(out, "CREM port") || !strings.Contains(out, "crem+tcaeth") {
		t.Fatalf("exit %d: %s %s", code, out, errs)
	}
	if code, _, _ := runCmd("lab", "--op", "cas"); code == 0 {
		t.Fatal("bad --op accepted")
	}
	if code, _, _ := runCmd("lab", "--loss", "lots"); code != 2 {
		t.Fatal("bad --loss not a usage error")
	}
}
