// Command gen writes deploy/grafana's dashboards (grafana.Dashboards) as
// JSON files into the current directory: `go generate ./deploy/grafana/`.
package main

import (
	"fmt"
	"os"

	"github.com/lockd-dev/lockd/deploy/grafana"
)

func main() {
	for _, d := range grafana.Dashboards() {
		b, err := d.JSON()
		if err == nil {
			err = os.WriteFile(d.File, b, 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "gen:", err)
			os.Exit(1)
		}
	}
}
