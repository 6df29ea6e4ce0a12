package testenv

import (
	"strconv"
	"strings"
)

// GlibcVersion turns "GLIBC_2.17" into 2017 (major*1000 + minor); 0 when
// the name is not a glibc version.
func GlibcVersion(v string) int {
	rest, ok := strings.CutPrefix(v, "GLIBC_")
	if !ok {
		return 0
	}
	maj, min, _ := strings.Cut(rest, ".")
	a, err1 := strconv.Atoi(maj)
	b, err2 := strconv.Atoi(strings.SplitN(min, ".", 2)[0])
	if err1 != nil || err2 != nil {
		return 0
	}
	return a*1000 + b
}
