//go:build !unix

package compare

import "time"

// processCPU is unknown here.
func processCPU() time.Duration { return 0 }
