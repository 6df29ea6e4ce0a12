// Package config loads gpusliced's configuration: defaults in code, then
// the YAML file (/etc/gpuslice/gpusliced.yaml or --config), then GPUSLICE_*
// environment variables, then command-line flags, through one viper
// instance. Unknown keys and malformed files are errors that name the file
// and line.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"
)

// DefaultFile is read when it exists and --config is not given.
const DefaultFile = "/etc/gpuslice/gpusliced.yaml"

// Config is the daemon's whole configuration.
type Config struct {
	RuntimeDir       string        `mapstructure:"runtime_dir" yaml:"runtime_dir"`
	StateDir         string        `mapstructure:"state_dir" yaml:"state_dir"`
	IPCSocket        string        `mapstructure:"ipc_socket" yaml:"ipc_socket"`
	AdminSocket      string        `mapstructure:"admin_socket" yaml:"admin_socket"`
	Listen           string        `mapstructure:"listen" yaml:"listen"`
	NVMLLibrary      string        `mapstructure:"nvml_library" yaml:"nvml_library"`
	Overcommit       float64       `mapstructure:"overcommit" yaml:"overcommit"`
	DefaultTTL       time.Duration `mapstructure:"default_ttl" yaml:"default_ttl"`
	RecoveryInterval time.Duration `mapstructure:"recovery_interval" yaml:"recovery_interval"`
	IPCToken         string        `mapstructure:"ipc_token" yaml:"ipc_token"`
	IPCTokenRequired bool          `mapstructure:"ipc_token_required" yaml:"ipc_token_required"`
	MetricsDebug     bool          `mapstructure:"metrics_debug" yaml:"metrics_debug"`
	LogLevel         string        `mapstructure:"log_level" yaml:"log_level"`
	Debug            bool          `mapstructure:"debug" yaml:"debug"`
	LedgerSlots      int           `mapstructure:"ledger_slots" yaml:"ledger_slots"`
	HistoryRetention time.Duration `mapstructure:"history_retention" yaml:"history_retention"`
	AuditInterval    time.Duration `mapstructure:"audit_interval" yaml:"audit_interval"`
	AuditPolicy      string        `mapstructure:"audit_policy" yaml:"audit_policy"`
	IPCConnsPerUID   int           `mapstructure:"ipc_conns_per_uid" yaml:"ipc_conns_per_uid"`
	ContextProbe     string        `mapstructure:"context_probe" yaml:"context_probe"`
	CUDALibrary      string        `mapstructure:"cuda_library" yaml:"cuda_library"`
	// SlurmCgroupRoot is the cgroup v2 directory holding Slurm's job
	// cgroups (job_<id>/ or <SLUID>/): where a job's quota becomes the
	// driver's memory limit on GPUs that have one. Empty: never.
	SlurmCgroupRoot string `mapstructure:"slurm_cgroup_root" yaml:"slurm_cgroup_root"`
	// SlurmCgroupJobIDPaths mirrors cgroup.conf CgroupJobIdPaths=yes
	// (Slurm 26.05+): job directories are job_<id> even when the job has
	// a SLUID.
	SlurmCgroupJobIDPaths bool `mapstructure:"slurm_cgroup_job_id_paths" yaml:"slurm_cgroup_job_id_paths"`
	// The compute policy: the GPU time share of the sessions the Prolog
	// creates (ComputePolicy; docs/compute-share.md).
	ComputeDefault   string `mapstructure:"compute_default" yaml:"compute_default"`
	ComputeUserShare bool   `mapstructure:"compute_user_share" yaml:"compute_user_share"`
	ComputeMax       string `mapstructure:"compute_max" yaml:"compute_max"`
	ComputeCap       string `mapstructure:"compute_cap" yaml:"compute_cap"`
	// Recording each ended job's figures in Slurm's accounting
	// (daemon/acctrecord; docs/daemon.md "Figures in Slurm's accounting"):
	// auto, on or off; Slurm's programs and slurm.conf; the queue's bound.
	Accounting         string `mapstructure:"accounting" yaml:"accounting"`
	Sacct              string `mapstructure:"sacct" yaml:"sacct"`
	Sacctmgr           string `mapstructure:"sacctmgr" yaml:"sacctmgr"`
	SlurmConf          string `mapstructure:"slurm_conf" yaml:"slurm_conf"`
	AccountingQueueMax int    `mapstructure:"accounting_queue_max" yaml:"accounting_queue_max"`

	// File is the configuration file that was read ("" if none).
	File string `mapstructure:"-" yaml:"-"`
	// ShowVersion is set by --version.
	ShowVersion bool `mapstructure:"-" yaml:"-"`
}

// DefaultContextProbe is where the packages install gpuslice-ctxprobe.
const DefaultContextProbe = "/usr/libexec/gpuslice/gpuslice-ctxprobe"

// DefaultSlurmCgroupRoot is where Slurm's cgroup/v2 plugin puts job
// cgroups with its defaults (CgroupMountpoint=/sys/fs/cgroup,
// CgroupSlice=system.slice, one slurmd per host).
const DefaultSlurmCgroupRoot = "/sys/fs/cgroup/system.slice/slurmstepd.scope"

// Defaults returns the built-in configuration.
func Defaults() Config {
	return Config{
		RuntimeDir:       "/run/gpuslice",
		StateDir:         "/var/lib/gpuslice",
		Overcommit:       1.0,
		DefaultTTL:       24 * time.Hour,
		RecoveryInterval: 5 * time.Second,
		LogLevel:         "info",
		LedgerSlots:      4096,
		HistoryRetention: 30 * 24 * time.Hour,
		AuditInterval:    500 * time.Millisecond,
		AuditPolicy:      "kill",
		IPCConnsPerUID:   64,
		ContextProbe:     DefaultContextProbe,
		SlurmCgroupRoot:  DefaultSlurmCgroupRoot,
		ComputeDefault:   "proportional",
		ComputeUserShare: true,
		ComputeMax:       "proportional",

		Accounting:         "auto",
		Sacct:              "/usr/bin/sacct",
		Sacctmgr:           "/usr/bin/sacctmgr",
		AccountingQueueMax: 10000,
	}
}

// key describes one configuration key: its flag (if any), environment
// names and help text.
type key struct {
	name string
	flag string
	env  []string
	help string
}

var keys = []key{
	{"runtime_dir", "runtime-dir", nil, "runtime directory (tmpfs): sockets and ledgers"},
	{"state_dir", "state-dir", nil, "state directory: the session database"},
	{"ipc_socket", "ipc-socket", []string{"GPUSLICE_IPC_SOCKET", "GPUSLICE_IPC_SOCK"}, "IPC socket path (default <runtime-dir>/ipc.sock)"},
	{"admin_socket", "admin-socket", []string{"GPUSLICE_ADMIN_SOCKET", "GPUSLICE_ADMIN_SOCK"}, "admin API socket path (default <runtime-dir>/admin.sock)"},
	{"listen", "listen", nil, "TCP address for /metrics and /healthz (empty: off)"},
	{"nvml_library", "nvml-library", nil, "path to libnvidia-ml.so.1 (empty: default lookup)"},
	{"overcommit", "overcommit", nil, "admission factor: quotas on a GPU may sum to capacity x overcommit"},
	{"default_ttl", "default-ttl", nil, "TTL of sessions created without one"},
	{"recovery_interval", "recovery-interval", nil, "period of the /proc sweep and TTL reaper"},
	{"ipc_token", "", nil, "shared token clients send at attach"},
	{"ipc_token_required", "ipc-token-required", nil, "refuse ATTACH/STATUS without the right token"},
	{"metrics_debug", "metrics-debug", nil, "export per-session metrics (label: session)"},
	{"log_level", "log-level", nil, "debug, info, warn or error"},
	{"debug", "", nil, "same as log_level debug"},
	{"ledger_slots", "ledger-slots", nil, "process slots per session ledger"},
	{"history_retention", "history-retention", nil, "how long reports of released sessions are kept"},
	{"audit_interval", "audit-interval", nil, "period of the audit of NVML per-process usage against the quotas"},
	{"audit_policy", "audit-policy", nil, "what an audited overrun does: kill (the offending processes) or log-only"},
	{"ipc_conns_per_uid", "ipc-conns-per-uid", nil, "open IPC connections one uid may hold (root: unlimited)"},
	{"context_probe", "context-probe", nil, "program that measures what a CUDA context costs on idle GPUs (empty: off; jobs measure it)"},
	{"cuda_library", "cuda-library", nil, "path to libcuda.so.1 for the context probe (empty: default lookup)"},
	{"slurm_cgroup_root", "slurm-cgroup-root", nil, "cgroup v2 directory of Slurm's job cgroups, where a job's quota becomes the driver's memory limit on GPUs that have one (R615+; empty: off)"},
	{"slurm_cgroup_job_id_paths", "slurm-cgroup-job-id-paths", nil, "job cgroups are job_<id> even for jobs with a SLUID (cgroup.conf CgroupJobIdPaths=yes, Slurm 26.05+)"},
	{"compute_default", "compute-default", nil, "GPU time weight of Slurm jobs that ask for none: proportional (the quota's fraction of the GPU), a percent or off"},
	{"compute_user_share", "compute-user-share", nil, "Slurm jobs may ask a weight of their own (--gpu-compute), up to compute_max"},
	{"compute_max", "compute-max", nil, "the most GPU time weight a Slurm job may ask: proportional or a percent (100: any)"},
	{"compute_cap", "compute-cap", nil, "ceiling of every Slurm job's GPU time, proportional or a percent (empty: none); a job may ask a lower one"},
	{"accounting", "accounting", nil, "record each ended job's GPU memory figures in Slurm's accounting (its AdminComment): auto (when sacctmgr is here and slurm.conf has AccountingStorageType=accounting_storage/slurmdbd), on or off"},
	{"sacct", "sacct", nil, "Slurm's sacct, which reads a job's AdminComment"},
	{"sacctmgr", "sacctmgr", nil, "Slurm's sacctmgr, which writes a job's AdminComment"},
	{"slurm_conf", "slurm-conf", nil, "slurm.conf for sacct and sacctmgr (SLURM_CONF; empty: theirs, /etc/slurm/slurm.conf)"},
	{"accounting_queue_max", "accounting-queue-max", nil, "records of ended jobs kept while Slurm's accounting is unreachable; past it new ones are dropped (as slurmctld's MaxDBDMsgs)"},
}

// Load builds the configuration from args (without the program name) and
// the process environment.
func Load(args []string, stderr io.Writer) (Config, error) {
	def := Defaults()
	v := viper.New()
	fs := pflag.NewFlagSet("gpusliced", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.SortFlags = false
	configFile := fs.String("config", "", "configuration file (default "+DefaultFile+" if it exists)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	fs.String("runtime-dir", def.RuntimeDir, keys[0].help)
	fs.String("state-dir", def.StateDir, keys[1].help)
	fs.String("ipc-socket", "", keys[2].help)
	fs.String("admin-socket", "", keys[3].help)
	fs.String("listen", "", keys[4].help)
	fs.String("nvml-library", "", keys[5].help)
	fs.Float64("overcommit", def.Overcommit, keys[6].help)
	fs.Duration("default-ttl", def.DefaultTTL, keys[7].help)
	fs.Duration("recovery-interval", def.RecoveryInterval, keys[8].help)
	fs.Bool("ipc-token-required", false, keys[10].help)
	fs.Bool("metrics-debug", false, keys[11].help)
	fs.String("log-level", def.LogLevel, keys[12].help)
	fs.Int("ledger-slots", def.LedgerSlots, keys[14].help)
	fs.Duration("history-retention", def.HistoryRetention, keys[15].help)
	fs.Duration("audit-interval", def.AuditInterval, keys[16].help)
	fs.String("audit-policy", def.AuditPolicy, keys[17].help)
	fs.Int("ipc-conns-per-uid", def.IPCConnsPerUID, keys[18].help)
	fs.String("context-probe", def.ContextProbe, keys[19].help)
	fs.String("cuda-library", "", keys[20].help)
	fs.String("slurm-cgroup-root", def.SlurmCgroupRoot, keys[21].help)
	fs.Bool("slurm-cgroup-job-id-paths", false, keys[22].help)
	fs.String("compute-default", def.ComputeDefault, keys[23].help)
	fs.Bool("compute-user-share", def.ComputeUserShare, keys[24].help)
	fs.String("compute-max", def.ComputeMax, keys[25].help)
	fs.String("compute-cap", "", keys[26].help)
	fs.String("accounting", def.Accounting, keys[27].help)
	fs.String("sacct", def.Sacct, keys[28].help)
	fs.String("sacctmgr", def.Sacctmgr, keys[29].help)
	fs.String("slurm-conf", "", keys[30].help)
	fs.Int("accounting-queue-max", def.AccountingQueueMax, keys[31].help)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: gpusliced [flags]\n\ngpusliced keeps per-job GPU-memory quotas (see docs/daemon.md).\n"+
			"Precedence: defaults < config file < GPUSLICE_* environment < flags.\n\nFlags:\n%s", fs.FlagUsages())
	}
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *showVersion {
		return Config{ShowVersion: true}, nil
	}

	v.SetDefault("runtime_dir", def.RuntimeDir)
	v.SetDefault("state_dir", def.StateDir)
	v.SetDefault("ipc_socket", "")
	v.SetDefault("admin_socket", "")
	v.SetDefault("listen", "")
	v.SetDefault("nvml_library", "")
	v.SetDefault("overcommit", def.Overcommit)
	v.SetDefault("default_ttl", def.DefaultTTL)
	v.SetDefault("recovery_interval", def.RecoveryInterval)
	v.SetDefault("ipc_token", "")
	v.SetDefault("ipc_token_required", false)
	v.SetDefault("metrics_debug", false)
	v.SetDefault("log_level", def.LogLevel)
	v.SetDefault("debug", false)
	v.SetDefault("ledger_slots", def.LedgerSlots)
	v.SetDefault("history_retention", def.HistoryRetention)
	v.SetDefault("audit_interval", def.AuditInterval)
	v.SetDefault("audit_policy", def.AuditPolicy)
	v.SetDefault("ipc_conns_per_uid", def.IPCConnsPerUID)
	v.SetDefault("context_probe", def.ContextProbe)
	v.SetDefault("cuda_library", "")
	v.SetDefault("slurm_cgroup_root", def.SlurmCgroupRoot)
	v.SetDefault("slurm_cgroup_job_id_paths", false)
	v.SetDefault("compute_default", def.ComputeDefault)
	v.SetDefault("compute_user_share", def.ComputeUserShare)
	v.SetDefault("compute_max", def.ComputeMax)
	v.SetDefault("compute_cap", "")
	v.SetDefault("accounting", def.Accounting)
	v.SetDefault("sacct", def.Sacct)
	v.SetDefault("sacctmgr", def.Sacctmgr)
	v.SetDefault("slurm_conf", "")
	v.SetDefault("accounting_queue_max", def.AccountingQueueMax)

	file := *configFile
	if file == "" {
		file = os.Getenv("GPUSLICE_CONFIG")
	}
	required := file != ""
	if file == "" {
		file = DefaultFile
	}
	data, err := os.ReadFile(file)
	switch {
	case err == nil:
		if err := checkFile(file, data); err != nil {
			return Config{}, err
		}
		v.SetConfigType("yaml")
		if err := v.ReadConfig(bytes.NewReader(data)); err != nil {
			return Config{}, fmt.Errorf("config %s: %w", file, err)
		}
	case errors.Is(err, os.ErrNotExist) && !required:
		file = ""
	default:
		return Config{}, fmt.Errorf("config: %w", err)
	}

	for _, k := range keys {
		names := k.env
		if names == nil {
			names = []string{"GPUSLICE_" + strings.ToUpper(k.name)}
		}
		if err := v.BindEnv(append([]string{k.name}, names...)...); err != nil {
			return Config{}, fmt.Errorf("config: bind env %s: %w", k.name, err)
		}
		if k.flag != "" {
			if err := v.BindPFlag(k.name, fs.Lookup(k.flag)); err != nil {
				return Config{}, fmt.Errorf("config: bind flag %s: %w", k.flag, err)
			}
		}
	}

	var cfg Config
	if err := v.Unmarshal(&cfg); err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	cfg.File = file
	if cfg.Debug {
		cfg.LogLevel = "debug"
	}
	if cfg.IPCSocket == "" {
		cfg.IPCSocket = filepath.Join(cfg.RuntimeDir, "ipc.sock")
	}
	if cfg.AdminSocket == "" {
		cfg.AdminSocket = filepath.Join(cfg.RuntimeDir, "admin.sock")
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// checkFile decodes the file strictly so that syntax errors, unknown keys
// and wrongly typed values are reported with the file name and line.
func checkFile(file string, data []byte) error {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return fmt.Errorf("config %s: %w", file, err)
	}
	if len(root.Content) == 0 {
		return nil // empty file
	}
	doc := root.Content[0]
	if doc.Kind != yaml.MappingNode {
		return fmt.Errorf("config %s: line %d: expected a mapping of keys to values", file, doc.Line)
	}
	known := map[string]bool{}
	for _, k := range keys {
		known[k.name] = true
	}
	for i := 0; i+1 < len(doc.Content); i += 2 {
		kn := doc.Content[i]
		if !known[kn.Value] {
			return fmt.Errorf("config %s: line %d: unknown key %q", file, kn.Line, kn.Value)
		}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	c := Defaults()
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("config %s: %w", file, err)
	}
	// Values that decode but are wrong, reported at their line. yaml
	// truncates 1.5 into an int field without a word: refuse it here.
	bad := c.fieldErrors()
	for i := 0; i+1 < len(doc.Content); i += 2 {
		kn, vn := doc.Content[i], doc.Content[i+1]
		if intKeys[kn.Value] && (vn.Kind != yaml.ScalarNode || vn.Tag != "!!int") {
			return fmt.Errorf("config %s: line %d: %s must be a whole number (got %q)", file, vn.Line, kn.Value, vn.Value)
		}
		if err := bad[kn.Value]; err != nil {
			return fmt.Errorf("config %s: line %d: %w", file, vn.Line, err)
		}
	}
	return nil
}

// intKeys are the keys whose value must be written as an integer.
var intKeys = map[string]bool{"ledger_slots": true, "ipc_conns_per_uid": true, "accounting_queue_max": true}

// Lower bounds below which a period only burns CPU.
const (
	MinRecoveryInterval = 10 * time.Millisecond
	MinAuditInterval    = 10 * time.Millisecond
	MinTTL              = 100 * time.Millisecond
)

// fieldErrors checks each value on its own, keyed by configuration key.
func (c Config) fieldErrors() map[string]error {
	bad := map[string]error{}
	if math.IsNaN(c.Overcommit) || math.IsInf(c.Overcommit, 0) || c.Overcommit <= 0 || c.Overcommit > 1000 {
		bad["overcommit"] = fmt.Errorf("overcommit must be a number in (0, 1000] (got %v)", c.Overcommit)
	}
	if c.DefaultTTL < MinTTL {
		bad["default_ttl"] = fmt.Errorf("default_ttl must be at least %v (got %v)", MinTTL, c.DefaultTTL)
	}
	if c.RecoveryInterval < MinRecoveryInterval {
		bad["recovery_interval"] = fmt.Errorf("recovery_interval must be at least %v (got %v)", MinRecoveryInterval, c.RecoveryInterval)
	}
	if c.HistoryRetention < MinTTL {
		bad["history_retention"] = fmt.Errorf("history_retention must be at least %v (got %v)", MinTTL, c.HistoryRetention)
	}
	if c.AuditInterval < MinAuditInterval {
		bad["audit_interval"] = fmt.Errorf("audit_interval must be at least %v (got %v)", MinAuditInterval, c.AuditInterval)
	}
	switch c.AuditPolicy {
	case "kill", "log-only":
	default:
		bad["audit_policy"] = fmt.Errorf("audit_policy must be kill or log-only (got %q)", c.AuditPolicy)
	}
	if c.IPCConnsPerUID < 1 || c.IPCConnsPerUID > 65536 {
		bad["ipc_conns_per_uid"] = fmt.Errorf("ipc_conns_per_uid must be 1..65536 (got %d)", c.IPCConnsPerUID)
	}
	if c.LedgerSlots < 1 || c.LedgerSlots > 65536 {
		bad["ledger_slots"] = fmt.Errorf("ledger_slots must be 1..65536 (got %d)", c.LedgerSlots)
	}
	if c.ContextProbe != "" && !filepath.IsAbs(c.ContextProbe) {
		bad["context_probe"] = fmt.Errorf("context_probe must be an absolute path or empty (got %q)", c.ContextProbe)
	}
	if c.SlurmCgroupRoot != "" && (!filepath.IsAbs(c.SlurmCgroupRoot) || filepath.Clean(c.SlurmCgroupRoot) != c.SlurmCgroupRoot) {
		bad["slurm_cgroup_root"] = fmt.Errorf("slurm_cgroup_root must be a clean absolute path or empty (got %q)", c.SlurmCgroupRoot)
	}
	if _, err := api.ParseComputeDefault(c.ComputeDefault); err != nil {
		bad["compute_default"] = fmt.Errorf("compute_default %w", err)
	}
	if _, err := api.ParseShareLimit(c.ComputeMax, false); err != nil {
		bad["compute_max"] = fmt.Errorf("compute_max %w", err)
	}
	if _, err := api.ParseShareLimit(c.ComputeCap, true); err != nil {
		bad["compute_cap"] = fmt.Errorf("compute_cap %w", err)
	}
	switch c.Accounting {
	case "auto", "on", "off":
	default:
		bad["accounting"] = fmt.Errorf("accounting must be auto, on or off (got %q)", c.Accounting)
	}
	for k, p := range map[string]string{"sacct": c.Sacct, "sacctmgr": c.Sacctmgr} {
		if c.Accounting != "off" && !filepath.IsAbs(p) {
			bad[k] = fmt.Errorf("%s must be an absolute path (got %q): gpusliced runs without a PATH of Slurm's", k, p)
		}
	}
	if c.SlurmConf != "" && !filepath.IsAbs(c.SlurmConf) {
		bad["slurm_conf"] = fmt.Errorf("slurm_conf must be an absolute path or empty (got %q)", c.SlurmConf)
	}
	if c.AccountingQueueMax < 1 || c.AccountingQueueMax > 10000000 {
		bad["accounting_queue_max"] = fmt.Errorf("accounting_queue_max must be 1..10000000 (got %d)", c.AccountingQueueMax)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad["log_level"] = fmt.Errorf("log_level must be debug, info, warn or error (got %q)", c.LogLevel)
	}
	return bad
}

// ComputePolicy is the compute policy the compute_* keys give (valid
// once Validate passed).
func (c Config) ComputePolicy() (api.ComputePolicy, error) {
	d, err := api.ParseComputeDefault(c.ComputeDefault)
	if err != nil {
		return api.ComputePolicy{}, fmt.Errorf("compute_default %w", err)
	}
	most, err := api.ParseShareLimit(c.ComputeMax, false)
	if err != nil {
		return api.ComputePolicy{}, fmt.Errorf("compute_max %w", err)
	}
	ceiling, err := api.ParseShareLimit(c.ComputeCap, true)
	if err != nil {
		return api.ComputePolicy{}, fmt.Errorf("compute_cap %w", err)
	}
	return api.ComputePolicy{Default: d, UserShare: c.ComputeUserShare, Max: most, Cap: ceiling}, nil
}

// Validate checks values that decode but make no sense.
func (c Config) Validate() error {
	var errs []error
	bad := c.fieldErrors()
	for _, k := range keys {
		if err := bad[k.name]; err != nil {
			errs = append(errs, err)
		}
	}
	if c.IPCTokenRequired && c.IPCToken == "" {
		errs = append(errs, errors.New("ipc_token_required is set but ipc_token (GPUSLICE_IPC_TOKEN) is empty"))
	}
	if len(c.IPCToken) > 256 {
		errs = append(errs, errors.New("ipc_token longer than 256 bytes"))
	}
	if c.RuntimeDir == "" || c.StateDir == "" {
		errs = append(errs, errors.New("runtime_dir and state_dir must be set"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return nil
}
