package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// The links gpuslice slurm-plugin makes. They are relative, so that they
// resolve the same inside an image and from outside it (--root), and each
// is replaced in one rename: a Slurm command started meanwhile sees the old
// link or the new one.

// errNotOurs: a file stands where a link would go and it is not one the
// package made (a plugin installed by hand, the site's own line).
var errNotOurs = errors.New("not the package's link")

// realPath resolves the symbolic links of a host path under the root, as
// far as it exists, and returns it as a host path.
func (s *pluginSetup) realPath(p string) string {
	p = filepath.Clean(p)
	if r, err := filepath.EvalSymlinks(s.at(p)); err == nil {
		return s.hostPath(r)
	}
	if p == "/" || p == "." {
		return p
	}
	return filepath.Join(s.realPath(filepath.Dir(p)), filepath.Base(p))
}

// hostPath turns a path under the root back into the host's view.
func (s *pluginSetup) hostPath(full string) string {
	root, err := filepath.EvalSymlinks(s.root)
	if err != nil {
		root = filepath.Clean(s.root)
	}
	switch {
	case root == "/":
		return full
	case full == root:
		return "/"
	case strings.HasPrefix(full, root+"/"):
		return full[len(root):]
	}
	return full
}

// resolve returns where the link at path points (a host path), "" when it
// is no symbolic link.
func (s *pluginSetup) resolve(path string) (string, error) {
	st, err := os.Lstat(s.at(path))
	if err != nil {
		return "", err
	}
	if st.Mode()&fs.ModeSymlink == 0 {
		return "", nil
	}
	t, err := os.Readlink(s.at(path))
	if err != nil {
		return "", err
	}
	if !filepath.IsAbs(t) {
		t = filepath.Join(s.realPath(filepath.Dir(path)), t)
	}
	return s.realPath(t), nil
}

// ours: the link at path points to own (a file) or below it (a directory).
func (s *pluginSetup) ours(target, own string) bool {
	own = s.realPath(own)
	return target == own || strings.HasPrefix(target, own+"/")
}

// link makes path a link to target; own is what a link of the package points
// to or into (anything else there is left alone: errNotOurs). It reports
// whether it changed anything.
func (s *pluginSetup) link(path, target, own string) (bool, error) {
	dir := s.realPath(filepath.Dir(path))
	rel, err := filepath.Rel(dir, s.realPath(target))
	if err != nil {
		return false, err
	}
	cur, err := s.resolve(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return false, err
	case cur == "" || !s.ours(cur, own):
		return false, fmt.Errorf("%s: %w", path, errNotOurs)
	default:
		if t, _ := os.Readlink(s.at(path)); t == rel {
			return false, nil
		}
	}
	if err := os.MkdirAll(s.at(dir), 0o755); err != nil {
		return false, err
	}
	tmp := s.at(filepath.Join(dir, "."+filepath.Base(path)+".gpuslice-new"))
	os.Remove(tmp)
	if err := os.Symlink(rel, tmp); err != nil {
		return false, err
	}
	if err := os.Rename(tmp, s.at(filepath.Join(dir, filepath.Base(path)))); err != nil {
		os.Remove(tmp)
		return false, err
	}
	return true, nil
}

// unlinkOurs removes path if it is the package's link (pointing to or into
// own); errNotOurs when something else stands there.
func (s *pluginSetup) unlinkOurs(path, own string) (bool, error) {
	cur, err := s.resolve(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, err
	case cur == "" || !s.ours(cur, own):
		return false, fmt.Errorf("%s: %w", path, errNotOurs)
	}
	if err := os.Remove(s.at(path)); err != nil {
		return false, err
	}
	return true, nil
}

// linkedRelease is the release of the packaged plugin link points to, ""
// when it points to none.
func (s *pluginSetup) linkedRelease(link string) string {
	cur, err := s.resolve(link)
	if err != nil || cur == "" || !s.ours(cur, spankPluginsDir) {
		return ""
	}
	return filepath.Base(filepath.Dir(cur))
}

// libcLacks lists the C library versions the plugin needs that the host's C
// library does not define, and names that library; nothing when either
// cannot be read (the loader will say).
func (s *pluginSetup) libcLacks(p slurmPlugin) ([]string, string) {
	needs, err := glibcNeeds(s.at(p.path))
	if err != nil {
		return nil, ""
	}
	var libc string
	var defs map[string]bool
	for _, c := range s.libcPaths() {
		if defs, err = glibcDefines(s.at(c)); err == nil {
			libc = c
			break
		}
	}
	if libc == "" {
		return nil, ""
	}
	var lack []string
	for _, n := range needs {
		if !defs[n] {
			lack = append(lack, n)
		}
	}
	return lack, libc
}

func (s *pluginSetup) libcPaths() []string {
	var out []string
	if t := multiarch(s.goarch); t != "" {
		out = append(out, "/lib/"+t+"/libc.so.6", "/usr/lib/"+t+"/libc.so.6")
	}
	return append(out, "/lib64/libc.so.6", "/usr/lib64/libc.so.6", "/lib/libc.so.6", "/usr/lib/libc.so.6")
}

// plugStackIncludes makes sure Slurm's plugstack.conf reads inc: it creates
// plugstack.conf with the include when there is none (SchedMD's RPMs ship
// none); when one exists without it, it says what to add. The note is ""
// when nothing is to be said.
func (s *pluginSetup) plugStackIncludes(c slurmConfig, inc string) (string, error) {
	glob := filepath.Join(filepath.Dir(inc), "*.conf")
	f, err := os.Open(s.at(c.plugStack))
	if errors.Is(err, fs.ErrNotExist) {
		body := "# Slurm's SPANK plugins: one file each in plugstack.conf.d (written by\n" +
			"# gpuslice slurm-plugin, which found no plugstack.conf here).\ninclude " + glob + "\n"
		if err := os.MkdirAll(s.at(filepath.Dir(c.plugStack)), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(s.at(c.plugStack), []byte(body), 0o644); err != nil {
			return "", err
		}
		return "created " + c.plugStack + " including " + glob, nil
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || !strings.EqualFold(fields[0], "include") {
			continue
		}
		pat := fields[1]
		if !filepath.IsAbs(pat) {
			pat = filepath.Join(filepath.Dir(c.plugStack), pat)
		}
		if ok, _ := filepath.Match(pat, inc); ok {
			return "", nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s does not read it: add 'include %s' there", c.plugStack, glob), nil
}
