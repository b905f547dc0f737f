package lock

import "github.com/spf13/cobra"

type cobraCommand = cobra.Command
