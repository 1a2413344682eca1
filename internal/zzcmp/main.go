package main

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/crem-project/crem/sim/model"
)

func main() {
	b, _ := os.ReadFile(os.Args[1])
	var rows []map[string]any
	json.Unmarshal(b, &rows)
	for _, r := range rows {
		if r["scheme"] != "sr-rto" {
			continue
		}
		size := int64(r["message_bytes"].(float64))
		p := r["drop_rate"].(float64)
		pk := (size + 4095) / 4096
		octets := size + pk*(12+4+28) + 16
		tinj := time.Duration(float64(octets) / float64(pk) * 8 / 400e9 * 1e9)
		m := model.SR{N: int(pk), TInj: tinj, RTO: 75 * time.Millisecond, RTT: 25 * time.Millisecond, P: p}
		mean, _ := m.Mean()
		ideal := m.Ideal().Seconds()
		sm := r["mean_s"].(float64)
		fmt.Printf("| %d MiB | %g | %.3f | %.3f | %+.1f%% | %.2f |\n", size>>20, p, sm/ideal, mean.Seconds()/ideal, (sm-mean.Seconds())/mean.Seconds()*100, r["retransmitted_packets"].(float64)/float64(pk))
	}
}
