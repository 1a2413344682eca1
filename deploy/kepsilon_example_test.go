package deploy

import (
	"fmt"

	"github.com/crem-project/crem/policy"
)

// Example_kAndEpsilon prints the repair count m the RECOMMENDED policy chooses (policy.ChooseM,
// RULINGS C6) for each block size k and target epsilon at each loss rate, with rho at its
// default 0.01 and max_m 64, and the repair overhead m/k: the table of the user guide's
// "Choosing k and epsilon". Run it with `go test ./deploy -run Example_kAndEpsilon -v`.
func Example_kAndEpsilon() {
	losses := []float64{1e-4, 1e-3, 1e-2, 5e-2}
	fmt.Printf("%4s %8s", "k", "epsilon")
	for _, p := range losses {
		fmt.Printf("  %13s", fmt.Sprintf("loss %g", p))
	}
	fmt.Println()
	for _, k := range []int{16, 32, 64} {
		for _, eps := range []float64{1e-3, 1e-4, 1e-6} {
			fmt.Printf("%4d %8g", k, eps)
			for _, p := range losses {
				m := policy.ChooseM(k, p, eps, policy.DefaultRho, 64)
				fmt.Printf("  %13s", fmt.Sprintf("m %d (%.0f%%)", m, 100*float64(m)/float64(k)))
			}
			fmt.Println()
		}
	}
	// Output:
	//    k  epsilon    loss 0.0001     loss 0.001      loss 0.01      loss 0.05
	//   16    0.001       m 0 (0%)       m 1 (6%)      m 2 (12%)      m 5 (31%)
	//   16   0.0001       m 0 (0%)      m 2 (12%)      m 3 (19%)      m 6 (38%)
	//   16    1e-06       m 0 (0%)      m 2 (12%)      m 5 (31%)      m 9 (56%)
	//   32    0.001       m 0 (0%)       m 1 (3%)       m 3 (9%)      m 7 (22%)
	//   32   0.0001       m 0 (0%)       m 2 (6%)      m 4 (12%)      m 9 (28%)
	//   32    1e-06       m 0 (0%)       m 3 (9%)      m 6 (19%)     m 11 (34%)
	//   64    0.001       m 0 (0%)       m 2 (3%)       m 4 (6%)     m 11 (17%)
	//   64   0.0001       m 0 (0%)       m 2 (3%)       m 5 (8%)     m 12 (19%)
	//   64    1e-06       m 0 (0%)       m 3 (5%)      m 7 (11%)     m 16 (25%)
}
