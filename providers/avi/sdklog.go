package avi

import (
	"flag"
	"sync"
)

var sdkLoggingOnce sync.Once

// prepareSDKLogging defuses two traps of the alb-sdk, which logs through glog
// on the standard flag set:
//
//   - NewAviSession calls flag.Parse() when the standard flags are unparsed,
//     which exits the process on the cobra/pflag flags in os.Args. Parsing
//     an empty argument list marks them parsed and leaves cobra's alone.
//   - glog writes log files into the temp directory unless told otherwise,
//     and exits the process when it cannot create them (a read-only root
//     file system). Unless the program set a glog destination itself, the
//     SDK's lines go to stderr instead. They carry no secret: see
//     authTransport.
func prepareSDKLogging() {
	sdkLoggingOnce.Do(func() {
		if !flag.Parsed() {
			_ = flag.CommandLine.Parse(nil)
		}
		chosen := false
		flag.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "logtostderr", "alsologtostderr", "log_dir":
				chosen = true
			}
		})
		if !chosen && flag.Lookup("logtostderr") != nil {
			_ = flag.Set("logtostderr", "true")
		}
	})
}
