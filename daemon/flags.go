package daemon

import "github.com/spf13/pflag"

// pflagHelp is returned by config.Load for -h/--help (usage already printed).
var pflagHelp = pflag.ErrHelp
