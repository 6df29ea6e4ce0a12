package api

// A SLUID is Slurm's (26.05+) unique id of one run of a job: "s" and 13
// characters of Crockford's base32 (print_sluid in Slurm's
// src/common/sluid.c), 65 bits of which the first character carries the
// top 4, so it is one of 0-9A-F. Slurm names a job's cgroup v2 directory by
// it (unless cgroup.conf CgroupJobIdPaths=yes) and gives it to the Prolog
// and Epilog as SLURM_JOB_SLUID.

const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// CanonicalSLUID returns s as Slurm prints it ("s" then upper case) and
// true when s is a well-formed SLUID: 14 characters, a leading s or S, then
// 13 characters of Crockford's alphabet (either case; no I, L, O or U),
// the first of them 0-9 or A-F. Anything else is false.
func CanonicalSLUID(s string) (string, bool) {
	if len(s) != 14 || (s[0] != 's' && s[0] != 'S') {
		return "", false
	}
	b := []byte(s)
	b[0] = 's'
	for i := 1; i < 14; i++ {
		c := b[i]
		if c >= 'a' && c <= 'z' {
			c -= 'a' - 'A'
		}
		v := crockfordValue(c)
		if v < 0 || (i == 1 && v > 15) {
			return "", false
		}
		b[i] = c
	}
	return string(b), true
}

// IsCanonicalSLUID reports whether s is a SLUID exactly as Slurm prints it
// (the name of a job's cgroup directory).
func IsCanonicalSLUID(s string) bool {
	c, ok := CanonicalSLUID(s)
	return ok && c == s
}

func crockfordValue(c byte) int {
	for i := 0; i < len(crockford); i++ {
		if crockford[i] == c {
			return i
		}
	}
	return -1
}
