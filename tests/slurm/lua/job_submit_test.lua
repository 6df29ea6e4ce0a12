-- Tests of etc/slurm/job_submit.lua's pure functions, outside slurmctld:
--   lua5.1 tests/slurm/lua/job_submit_test.lua etc/slurm/job_submit.lua
-- (make test-slurm runs it). Exits 1 on the first failure of each case and
-- prints every failure.

local path = arg[1] or "etc/slurm/job_submit.lua"
local gs = dofile(path)
local failures, cases = 0, 0
local GiB, MiB = 1073741824, 1048576

local function show(v)
	if type(v) ~= "table" then
		return tostring(v)
	end
	local keys = {}
	for k in pairs(v) do
		table.insert(keys, tostring(k))
	end
	table.sort(keys)
	local parts = {}
	for _, k in ipairs(keys) do
		local val = v[k]
		if val == nil then
			val = v[tonumber(k)]
		end
		table.insert(parts, k .. "=" .. show(val))
	end
	return "{" .. table.concat(parts, " ") .. "}"
end

local function check(name, got, want)
	cases = cases + 1
	if show(got) ~= show(want) then
		failures = failures + 1
		io.stderr:write(string.format("FAIL %s\n  got  %s\n  want %s\n", name, show(got), show(want)))
	end
end

-- gpu_mem_from_env
check("GPU_MEM found", {gs.gpu_mem_from_env({[0] = "OTHER=1", [1] = "GPU_MEM=8589934592"})}, {8 * GiB})
check("no GPU_MEM", {gs.gpu_mem_from_env({[0] = "OTHER=1"})}, {})
check("no env", {gs.gpu_mem_from_env(nil)}, {})
check("GPU_MEM from default=", gs.gpu_mem_is_default({[0] = "GPU_MEM=1", [1] = "GPU_MEM_DEFAULT=1"}), true)
check("GPU_MEM from --gpu-mem", gs.gpu_mem_is_default({[0] = "GPU_MEM=1", [1] = "GPU_MEM_DEFAULT=0"}), false)
check("GPU_MEM from an older plugin", gs.gpu_mem_is_default({[0] = "GPU_MEM=1"}), false)
check("bad GPU_MEM", {gs.gpu_mem_from_env({[0] = "GPU_MEM=8G"})}, {nil, "invalid GPU_MEM '8G' in the job's SPANK environment"})
check("zero GPU_MEM", {gs.gpu_mem_from_env({[0] = "GPU_MEM=0"})}, {nil, "invalid GPU_MEM '0' in the job's SPANK environment"})

-- mib_ceil, format_mib
check("1 byte is 1 MiB", gs.mib_ceil(1), 1)
check("8 GiB", gs.mib_ceil(8 * GiB), 8192)
check("8 GiB + 1", gs.mib_ceil(8 * GiB + 1), 8193)
check("format GiB", gs.format_mib(16384), "16GiB")
check("format MiB", gs.format_mib(512), "512MiB")
check("format not whole GiB", gs.format_mib(1536), "1536MiB")

-- parse_gres
check("gres list", gs.parse_gres("gres:gpu:2,gres/shard:100,gpu:a100:3,gres:gpu"), {
	{name = "gpu", count = 2, raw = "gres:gpu:2"},
	{name = "shard", count = 100, raw = "gres/shard:100"},
	{name = "gpu", type = "a100", count = 3, raw = "gpu:a100:3"},
	{name = "gpu", count = 1, raw = "gres:gpu"},
})
check("empty gres", gs.parse_gres(nil), {})
check("gres counts as Slurm prints them", gs.parse_gres("shard:16K,gres/shard:2M,gpu:a100:1K(S:0-1)"), {
	{name = "shard", count = 16384, raw = "shard:16K"},
	{name = "shard", count = 2097152, raw = "gres/shard:2M"},
	{name = "gpu", type = "a100", count = 1024, raw = "gpu:a100:1K(S:0-1)"},
})
check("gres count", {gs.gres_count("16k"), gs.gres_count("12"), gs.gres_count("a100"), gs.gres_count("")}, {16384, 12})
local kconf = gs.parse_conf({"NodeName=k1 Gres=gpu:1,shard:16K", "PartitionName=k Nodes=k1"})
check("slurm.conf in the K form", {gs.partition_gpu_sizes(kconf, "k")}, {{16384}, "k"})

-- expand_hostlist
check("hostlist", gs.expand_hostlist("tn[1-3,5],gpu01,n[08-10]"),
	{"tn1", "tn2", "tn3", "tn5", "gpu01", "n08", "n09", "n10"})

-- parse_conf, partition_gpu_sizes
local conf = gs.parse_conf({
	"# comment NodeName=ignored Gres=gpu:9,shard:9",
	"NodeName=tn1 NodeAddr=10.0.0.1 Gres=gpu:2,shard:32768 CPUs=8",
	"NodeName=tn[2-3] Gres=gpu:2,shard:163840",
	"NodeName=cpu1 CPUs=4",
	"PartitionName=gpu Nodes=tn[1-3] Default=YES",
	"PartitionName=big Nodes=tn2,tn3",
	"PartitionName=cpu Nodes=cpu1",
	"PartitionName=all Nodes=ALL",
})
check("node sizes", {conf.nodes.tn1.gpu_mib, conf.nodes.tn3.gpu_mib, conf.nodes.cpu1.gpu_mib}, {16384, 81920})
check("default partition", conf.default_partition, "gpu")
check("default partition sizes", {gs.partition_gpu_sizes(conf, nil)}, {{16384, 81920, 81920}, "gpu"})
check("named partition sizes", {gs.partition_gpu_sizes(conf, "big")}, {{81920, 81920}, "big"})
check("ALL partition sizes", {gs.partition_gpu_sizes(conf, "all")}, {{16384, 81920, 81920}, "all"})
check("cpu partition", {gs.partition_gpu_sizes(conf, "cpu")}, {{}, "cpu"})
check("requested nodes", {gs.node_gpu_sizes(conf, "tn[1-2],cpu1")}, {{16384, 81920}, "nodes tn[1-2],cpu1"})
local tn1_sizes = gs.node_gpu_sizes(conf, "tn1")
check("requested node too small", {gs.translate({gpu_mem = 20 * GiB}, tn1_sizes, "nodes tn1")},
	{nil, "gpuslice: --gpu-mem=20GiB is larger than any GPU in nodes tn1: the largest has 16GiB"})

-- tres_prefix: the job's own TRES strings, else the Slurm release
check("prefix 22.05 job", gs.tres_prefix({tres_per_node = "gres:nic:1"}, {}), "gres:")
check("prefix 24.11 job", gs.tres_prefix({tres_per_job = "gres/gpu:2"}, {ESLURM_INVALID_GRES = 2072}), "gres/")
check("prefix 22.05, no TRES", gs.tres_prefix({}, {SUCCESS = 0}), "gres:")
check("prefix 23.02 on, no TRES", gs.tres_prefix({}, {SUCCESS = 0, ESLURM_INVALID_GRES = 2072}), "gres/")
check("prefix, no slurm table", gs.tres_prefix({}, nil), "gres:")
check("24.11: shards as gres/shard", {gs.translate({gpu_mem = 4 * GiB, tres_per_node = "gres/nic:1", prefix = "gres/"},
	{16384}, "partition gpu")}, {{set = true, tres_per_node = "gres/nic:1,gres/shard:4096", why = "4GiB of one GPU"}})

-- translate
local sizes = {16384, 81920}
local tests = {
	{"--gpu-mem only: shards of one GPU", {gpu_mem = 8 * GiB}, sizes,
		{set = true, tres_per_node = "gres:shard:8192", why = "8GiB of one GPU"}},
	{"--gpu-mem rounds up to MiB", {gpu_mem = 8 * GiB + 1}, sizes,
		{set = true, tres_per_node = "gres:shard:8193", why = "8193MiB of one GPU"}},
	{"other gres kept", {gpu_mem = 4 * GiB, tres_per_node = "gres:nic:1"}, sizes,
		{set = true, tres_per_node = "gres:nic:1,gres:shard:4096", why = "4GiB of one GPU"}},
	{"--gpu-mem = the largest GPU", {gpu_mem = 80 * GiB}, sizes,
		{set = true, tres_per_node = "gres:shard:81920", why = "80GiB of one GPU"}},
	{"--gpu-mem larger than any GPU", {gpu_mem = 100 * GiB}, sizes,
		nil, "gpuslice: --gpu-mem=100GiB is larger than any GPU in partition gpu: the largest has 80GiB"},
	{"--gpu-mem one MiB too large", {gpu_mem = 80 * GiB + 1}, sizes,
		nil, "gpuslice: --gpu-mem=81921MiB is larger than any GPU in partition gpu: the largest has 80GiB"},
	{"--gpu-mem on a partition without GPUs", {gpu_mem = GiB}, {},
		nil, "gpuslice: --gpu-mem: partition gpu has no GPU known to gpuslice (no Gres=gpu:N,shard:M in slurm.conf)"},
	{"--gres=gpu:1 --gpu-mem: whole GPU, node of its own", {gpu_mem = 4 * GiB, tres_per_node = "gres:gpu:1"}, sizes,
		{set = false, whole = true, exclusive = true, why = "4GiB on each of its whole GPUs: a node of its own"}},
	{"--gpus=2 --gpu-mem", {gpu_mem = 8 * GiB, tres_per_job = "gres:gpu:2"}, sizes,
		{set = false, whole = true, exclusive = true, why = "8GiB on each of its whole GPUs: a node of its own"}},
	{"--gpus-per-task --gpu-mem", {gpu_mem = 8 * GiB, tres_per_task = "gres:gpu:1"}, sizes,
		{set = false, whole = true, exclusive = true, why = "8GiB on each of its whole GPUs: a node of its own"}},
	{"--gpus=2 --gpu-mem too large", {gpu_mem = 81 * GiB, tres_per_job = "gres:gpu:2"}, sizes,
		nil, "gpuslice: --gpu-mem=81GiB is larger than any GPU in partition gpu: the largest has 80GiB"},
	{"whole GPU: node of its own", {tres_per_node = "gres:gpu:1"}, sizes,
		{set = false, whole = true, exclusive = true, why = "whole GPUs: a node of its own"}},
	{"whole GPU, quota from default=: none", {gpu_mem = 300 * MiB, gpu_mem_default = true, tres_per_node = "gres:gpu:1"}, sizes,
		{set = false, whole = true, exclusive = true, why = "whole GPUs: a node of its own"}},
	{"whole GPUs, default= larger than any GPU: not refused", {gpu_mem = 100 * GiB, gpu_mem_default = true, tres_per_job = "gres:gpu:2"}, sizes,
		{set = false, whole = true, exclusive = true, why = "whole GPUs: a node of its own"}},
	{"no GPU, quota from default=: shards", {gpu_mem = 300 * MiB, gpu_mem_default = true}, sizes,
		{set = true, tres_per_node = "gres:shard:300", why = "300MiB of one GPU"}},
	{"--gpus-per-socket", {tres_per_socket = "gres:gpu:1"}, sizes,
		{set = false, whole = true, exclusive = true, why = "whole GPUs: a node of its own"}},
	-- Where Slurm keeps a GPU held as gres/gpu away from shards.
	{"whole GPU beside other jobs", {tres_per_node = "gres/gpu:1", share_node = true}, sizes,
		{set = false, whole = true, exclusive = false, why = "whole GPUs: beside other jobs"}},
	{"--gpus=2 --gpu-mem beside other jobs", {gpu_mem = 8 * GiB, tres_per_job = "gres/gpu:2", share_node = true}, sizes,
		{set = false, whole = true, exclusive = false, why = "8GiB on each of its whole GPUs: beside other jobs"}},
	{"whole GPU, default=, beside other jobs", {gpu_mem = 300 * MiB, gpu_mem_default = true, tres_per_node = "gres/gpu:1", share_node = true}, sizes,
		{set = false, whole = true, exclusive = false, why = "whole GPUs: beside other jobs"}},
	{"--gpu-mem only: shards whatever the rule", {gpu_mem = 8 * GiB, prefix = "gres/", share_node = true}, sizes,
		{set = true, tres_per_node = "gres/shard:8192", why = "8GiB of one GPU"}},
	{"--gpus=2 --gpu-mem too large beside other jobs", {gpu_mem = 81 * GiB, tres_per_job = "gres/gpu:2", share_node = true}, sizes,
		nil, "gpuslice: --gpu-mem=81GiB is larger than any GPU in partition gpu: the largest has 80GiB"},
	{"no GPU: untouched", {}, sizes, {set = false, why = "no GPU asked"}},
	{"--gres=shard refused", {tres_per_node = "gres:shard:100"}, sizes,
		nil, "gpuslice: --gres=shard is not accepted here: ask for GPU memory with --gpu-mem=SIZE (e.g. --gpu-mem=8G), the scheduler places the job by it"},
	{"--gres=mps refused", {gpu_mem = GiB, tres_per_job = "gres:mps:50"}, sizes,
		nil, "gpuslice: --gres=mps is not accepted here: ask for GPU memory with --gpu-mem=SIZE (e.g. --gpu-mem=8G), the scheduler places the job by it"},
}
for _, tt in ipairs(tests) do
	local change, msg = gs.translate(tt[2], tt[3], "partition gpu")
	check(tt[1], {change, msg}, {tt[4], tt[5]})
end

-- Which Slurm this is, from what job_submit.lua sees of it. The slurm
-- tables as each release's src/lua/slurm_lua.c fills them (the constants
-- that tell them apart).
local t2205 = {SUCCESS = 0, ERROR = -1}
local t2311 = {SUCCESS = 0, ESLURM_INVALID_GRES = 2072, GRES_ALLOW_TASK_SHARING = 1}
local t2405 = {SUCCESS = 0, ESLURM_INVALID_GRES = 2072, STEPMGR_ENABLED = 1}
check("family 22.05", {gs.release_family(t2205), gs.release_family(nil)}, {"22.05", "22.05"})
check("family 23.02 to 23.11", gs.release_family(t2311), "23.02")
check("family 24.05 on", gs.release_family(t2405), "24.05")

-- release_strings: what an executable names, between NUL bytes
check("releases in an executable", gs.release_strings("\0ELF\0slurmctld version %s started\0" .. "23.11.11\0" ..
	"1.2.13\0" .. "10.77.0.1\0" .. "x23.11.4\0" .. "23.11.1\0" .. "24.05.8"), {["23.11.11"] = true, ["23.11.1"] = true})
check("releases side by side", gs.release_strings("\0" .. "22.05.8\0" .. "23.02.7\0"), {["22.05.8"] = true, ["23.02.7"] = true})
check("no release", gs.release_strings("\0\0slurm\0"), {})
check("release_at_least", {gs.release_at_least("23.11.5", "23.11.5"), gs.release_at_least("23.11.11", "23.11.5"),
	gs.release_at_least("23.11.4", "23.11.5"), gs.release_at_least("23.02.9", "23.11.5"),
	gs.release_at_least("24.05.0", "23.11.5"), gs.release_at_least("x", "23.11.5")}, {true, true, false, false, true, false})

-- gres_gpu_apart: the fix is in 23.11.5
check("22.05: not apart", {gs.gres_gpu_apart("22.05", {})}, {false, "Slurm 22.05 or older"})
check("24.05 on: apart", {gs.gres_gpu_apart("24.05", {})}, {true, "Slurm 24.05 or later"})
check("23.11.11: apart", {gs.gres_gpu_apart("23.02", {["23.11.11"] = true, ["10.11.12"] = true})}, {true, "Slurm 23.11.11"})
check("23.11.5: apart", {gs.gres_gpu_apart("23.02", {["23.11.5"] = true})}, {true, "Slurm 23.11.5"})
check("23.11.4: not apart", {gs.gres_gpu_apart("23.02", {["23.11.4"] = true})}, {false, "Slurm 23.11.4"})
check("23.02.7: not apart", {gs.gres_gpu_apart("23.02", {["23.02.7"] = true})}, {false, "Slurm 23.02.7"})
check("23.x not named: not apart", {gs.gres_gpu_apart("23.02", {["22.05.8"] = true})},
	{false, "Slurm 23.02 to 23.11 (slurmctld does not say which)"})
check("23.x named twice: not apart", {gs.gres_gpu_apart("23.02", {["23.11.11"] = true, ["23.02.1"] = true})},
	{false, "Slurm 23.02 to 23.11 (slurmctld names more than one)"})

-- whole_gpus_share_node: the site's setting over what the release does
check("auto, apart", {gs.whole_gpus_share_node("auto", true, "Slurm 24.05 or later")},
	{true, "Slurm 24.05 or later keeps a GPU held as gres/gpu away from shards"})
check("auto, not apart", {gs.whole_gpus_share_node("auto", false, "Slurm 22.05 or older")},
	{false, "Slurm 22.05 or older: taken to give a GPU as gres/gpu while its shards are in use, as before 23.11.5"})
check("no setting: auto", {gs.whole_gpus_share_node(nil, true, "Slurm 23.11.11")},
	{true, "Slurm 23.11.11 keeps a GPU held as gres/gpu away from shards"})
check("share", {gs.whole_gpus_share_node("share", false, "Slurm 23.02 to 23.11 (slurmctld does not say which)")},
	{true, "whole_gpus = share"})
check("node", {gs.whole_gpus_share_node("node", true, "Slurm 24.05 or later")}, {false, "whole_gpus = node"})
check("bad setting", {gs.whole_gpus_share_node("yes", true, "Slurm 24.05 or later")},
	{nil, "gpuslice: this cluster's setting whole_gpus: 'yes': expected auto, share or node (job_submit.lua or GPUSLICE_WHOLE_GPUS; tell your admin)"})
check("default setting", gs.site.whole_gpus, "auto")
-- Outside slurmctld /proc/self/exe is Lua's: a 23.x table there names no
-- Slurm release, so no fix is assumed.
check("this executable on a 23.x table", {gs.slurmctld_gres_gpu_apart(t2311)},
	{false, "Slurm 23.02 to 23.11 (slurmctld does not say which)"})
check("a 24.05 table", {gs.slurmctld_gres_gpu_apart(t2405)}, {true, "Slurm 24.05 or later"})

-- The entry points slurmctld calls, with a stand-in for its slurm table
-- and slurm.conf.
local logged = {}
slurm = {SUCCESS = 0, ERROR = -1,
	log_user = function(fmt, ...) table.insert(logged, "user: " .. string.format(fmt, ...)) end,
	log_info = function(fmt, ...) table.insert(logged, "info: " .. string.format(fmt, ...)) end}
gs.load_conf = function() return conf end
local function submit(job_desc)
	logged = {}
	local rc = slurm_job_submit(job_desc, {}, 1001)
	return rc, job_desc, logged
end
local rc, jd, log = submit({spank_job_env = {[0] = "GPU_MEM=4294967296"}})
check("submit --gpu-mem", {rc, jd.tres_per_node, jd.shared}, {0, "gres:shard:4096"})
slurm.ESLURM_INVALID_GRES = 2072
rc, jd, log = submit({spank_job_env = {[0] = "GPU_MEM=4294967296"}})
check("submit --gpu-mem on 24.11", {rc, jd.tres_per_node, jd.shared}, {0, "gres/shard:4096"})
slurm.ESLURM_INVALID_GRES = nil
rc, jd, log = submit({spank_job_env = {[0] = "GPU_MEM=4294967296"}, tres_per_job = "gres:gpu:2"})
check("submit --gpus=2 --gpu-mem on 22.05: a node of its own", {rc, jd.tres_per_node, jd.tres_per_job, jd.shared, log[1]},
	{0, nil, "gres:gpu:2", 0, "info: gpuslice: job from uid 1001: 4GiB on each of its whole GPUs: a node of its own " ..
		"(Slurm 22.05 or older: taken to give a GPU as gres/gpu while its shards are in use, as before 23.11.5) (tres_per_node=nil)"})
slurm.ESLURM_INVALID_GRES, slurm.STEPMGR_ENABLED = 2072, 1
rc, jd, log = submit({spank_job_env = {[0] = "GPU_MEM=4294967296"}, tres_per_job = "gres/gpu:2"})
check("submit --gpus=2 --gpu-mem on 24.05 on: beside other jobs", {rc, jd.tres_per_node, jd.tres_per_job, jd.shared, log[1]},
	{0, nil, "gres/gpu:2", nil, "info: gpuslice: job from uid 1001: 4GiB on each of its whole GPUs: beside other jobs " ..
		"(Slurm 24.05 or later keeps a GPU held as gres/gpu away from shards) (tres_per_node=nil)"})
rc, jd, log = submit({tres_per_node = "gres/gpu:1"})
check("submit --gres=gpu:1 on 24.05 on", {rc, jd.tres_per_node, jd.shared}, {0, "gres/gpu:1", nil})
gs.site.whole_gpus = "node"
rc, jd, log = submit({tres_per_node = "gres/gpu:1"})
check("submit --gres=gpu:1, whole_gpus = node", {rc, jd.shared, log[1]},
	{0, 0, "info: gpuslice: job from uid 1001: whole GPUs: a node of its own (whole_gpus = node) (tres_per_node=gres/gpu:1)"})
gs.site.whole_gpus = "sometimes"
rc, jd, log = submit({spank_job_env = {[0] = "GPU_MEM=4294967296"}})
check("submit with a bad whole_gpus", {rc, jd.tres_per_node, log[1]}, {-1, nil, "user: gpuslice: this cluster's setting whole_gpus: " ..
	"'sometimes': expected auto, share or node (job_submit.lua or GPUSLICE_WHOLE_GPUS; tell your admin)"})
gs.site.whole_gpus = "auto"
slurm.ESLURM_INVALID_GRES, slurm.STEPMGR_ENABLED = nil, nil
rc, jd, log = submit({tres_per_node = "gres:gpu:1"})
check("submit --gres=gpu:1 on 22.05", {rc, jd.tres_per_node, jd.shared}, {0, "gres:gpu:1", 0})
rc, jd, log = submit({spank_job_env = {[0] = "GPU_MEM=107374182400"}, partition = "big"})
check("submit too large", {rc, log[1]}, {-1, "user: gpuslice: --gpu-mem=100GiB is larger than any GPU in partition big: the largest has 80GiB"})
rc, jd, log = submit({spank_job_env = {[0] = "GPU_MEM=21474836480"}, req_nodes = "tn1"})
check("submit too large for -w", {rc, log[1]}, {-1, "user: gpuslice: --gpu-mem=20GiB is larger than any GPU in nodes tn1: the largest has 16GiB"})
rc, jd, log = submit({spank_job_env = {[0] = "GPU_MEM=x"}})
check("submit bad GPU_MEM", {rc, log[1]}, {-1, "user: gpuslice: invalid GPU_MEM 'x' in the job's SPANK environment"})
rc, jd, log = submit({})
check("submit without GPU", {rc, jd.tres_per_node, jd.shared, #log}, {0, nil, nil, 0})
check("modify by the owner", slurm_job_modify({tres_per_node = "gres:shard:1"}, {job_id = 7}, {}, 1001), -1)
check("modify by root", slurm_job_modify({tres_per_node = "gres:shard:1"}, {job_id = 7}, {}, 0), 0)
check("modify of something else", slurm_job_modify({time_limit = 5}, {job_id = 7}, {}, 1001), 0)

-- The whole-GPU note in the job's comment (the Prolog gives a job with
-- whole GPUs and the default quota no session): only job_submit.lua puts it
-- there, and a user's comment is kept.
local note = gs.whole_gpus_note
check("note", note, "gpuslice=whole-gpus")
check("asks whole GPUs", {gs.asks_whole_gpus({tres_per_job = "gres:gpu:2"}), gs.asks_whole_gpus({tres_per_node = "gres/gpu:a100:1"}),
	gs.asks_whole_gpus({tres_per_socket = "gres/other:1,gres/gpu:1"}), gs.asks_whole_gpus({tres_per_node = "gres:shard:300"}),
	gs.asks_whole_gpus({})}, {true, true, true, false, false})
check("comment without a note", {gs.comment_without_note("  my run  ")}, {"  my run  ", false})
check("no comment", {gs.comment_without_note(nil)}, {"", false})
check("the note alone removed", {gs.comment_without_note(note)}, {"", true})
check("the note removed from the user's comment", {gs.comment_without_note("run 7 " .. note)}, {"run 7", true})
check("the note removed however often", {gs.comment_without_note(note .. " a " .. note .. note)}, {"a", true})
check("a note made of what a removal joins is removed too",
	{gs.comment_without_note("x " .. string.sub(note, 1, 5) .. note .. string.sub(note, 6))}, {"x", true})
check("has the note", {gs.comment_has_note(note), gs.comment_has_note("mine " .. note), gs.comment_has_note("mine" .. note),
	gs.comment_has_note(note .. " mine"), gs.comment_has_note(nil), gs.comment_has_note("")}, {true, true, false, false, false, false})
check("comment with the note", {gs.comment_with_note(nil, true)}, {note})
check("the user's comment, then the note", {gs.comment_with_note("mine", true)}, {"mine " .. note})
check("the user's note dropped", {gs.comment_with_note("mine " .. note, false)}, {"mine"})
check("a long comment without the note is Slurm's to judge", {gs.comment_with_note(string.rep("c", 1100), false)}, {string.rep("c", 1100)})
check("a comment too long for the note", {gs.comment_with_note(string.rep("c", 1005), true)}, {nil,
	"gpuslice: --comment is too long: a job given whole GPUs without --gpu-mem carries the note 'gpuslice=whole-gpus' " ..
	"after its comment, and Slurm keeps at most 1024 characters; shorten the comment to 1004"})
check("the longest comment with the note", {#gs.comment_with_note(string.rep("c", 1004), true)}, {1024})
local dflt = {[0] = "GPU_MEM=1073741824", [1] = "GPU_MEM_DEFAULT=1"}
local mine = {[0] = "GPU_MEM=1073741824", [1] = "GPU_MEM_DEFAULT=0"}
rc, jd, log = submit({spank_job_env = dflt, tres_per_job = "gres:gpu:1"})
check("submit whole GPUs, default quota: the note", {rc, jd.comment}, {0, note})
rc, jd, log = submit({spank_job_env = dflt, tres_per_node = "gres:gpu:1", comment = "mine"})
check("submit whole GPUs, default quota: the user's comment kept", {rc, jd.comment}, {0, "mine " .. note})
rc, jd, log = submit({spank_job_env = dflt, comment = note})
check("submit a share, default quota, the note forged: removed", {rc, jd.comment, jd.tres_per_node, log[1]},
	{0, "", "gres:shard:1024", "user: gpuslice: 'gpuslice=whole-gpus' was removed from the job's comment: only the scheduler writes it"})
rc, jd, log = submit({spank_job_env = dflt, comment = "x " .. string.sub(note, 1, 5) .. note .. string.sub(note, 6)})
check("submit a share, the note forged in pieces: removed", {rc, jd.comment}, {0, "x"})
rc, jd, log = submit({spank_job_env = mine, tres_per_job = "gres:gpu:1", comment = "a " .. note})
check("submit whole GPUs with --gpu-mem: no note, the forged one removed", {rc, jd.comment}, {0, "a"})
rc, jd, log = submit({tres_per_job = "gres:gpu:1", comment = "mine"})
check("submit whole GPUs without any quota: the comment untouched", {rc, jd.comment}, {0, "mine"})
rc, jd, log = submit({spank_job_env = mine, comment = "  spaced  "})
check("submit a share: the comment untouched, nothing said", {rc, jd.comment, string.sub(log[1] or "", 1, 5)}, {0, "  spaced  ", "info:"})
rc, jd, log = submit({spank_job_env = dflt, tres_per_job = "gres:gpu:1", comment = string.rep("c", 1010)})
check("submit whole GPUs, default quota, a comment too long for the note", {rc, string.sub(log[1] or "", 1, 42)},
	{-1, "user: gpuslice: --comment is too long: a j"})
local function modify(job_desc, rec, uid)
	logged = {}
	return slurm_job_modify(job_desc, rec, {}, uid), job_desc
end
rc, jd = modify({comment = note}, {job_id = 7, comment = "mine"}, 1001)
check("modify: the owner cannot add the note", {rc, jd.comment}, {0, ""})
rc, jd = modify({comment = "new " .. note}, {job_id = 7}, 1001)
check("modify: the owner cannot add the note after a comment", {rc, jd.comment}, {0, "new"})
rc, jd = modify({comment = "new"}, {job_id = 7, comment = "old " .. note}, 1001)
check("modify: the owner's new comment keeps the note", {rc, jd.comment}, {0, "new " .. note})
rc, jd = modify({comment = ""}, {job_id = 7, comment = note}, 1001)
check("modify: the owner cannot remove the note", {rc, jd.comment}, {0, note})
rc, jd = modify({comment = "plain"}, {job_id = 7, comment = "old"}, 1001)
check("modify: a plain comment changed as asked", {rc, jd.comment}, {0, "plain"})
rc, jd = modify({comment = note}, {job_id = 7}, 0)
check("modify: root may set the note", {rc, jd.comment}, {0, note})
rc, jd = modify({comment = string.rep("c", 1010)}, {job_id = 7, comment = note}, 1001)
check("modify: a comment too long for the job's note", rc, -1)

if failures > 0 then
	io.stderr:write(string.format("job_submit.lua: %d of %d checks failed\n", failures, cases))
	os.exit(1)
end
print(string.format("job_submit.lua: %d checks passed", cases))
