--[[
gpuslice job_submit.lua: slurmctld schedules GPU memory.

Install next to slurm.conf (Slurm loads job_submit.lua from the directory of
slurm.conf) and set JobSubmitPlugins=lua. See docs/slurm.md.

Every GPU is described to Slurm as gres/gpu plus gres/shard with one shard
per MiB of GPU memory (times gpusliced's overcommit), as printed by
`gpuslice slurm-config`. This script turns what the user asked for into what
slurmctld schedules, on the controller, so a user cannot bypass it:

  --gpu-mem=SIZE                  gres/shard:<SIZE in MiB>: SIZE of one GPU
                                  on each node of the job (Slurm 22.05
                                  takes a job's shards on a node from one
                                  GPU, and never puts more shards on a GPU
                                  than it has)
  --gpus/--gres=gpu:N[/--gpu-mem] N whole GPUs, with the quota on each
                                  when --gpu-mem is given; beside other
                                  jobs where Slurm keeps a GPU held as
                                  gres/gpu away from shards (23.11.5 on),
                                  else on a node of its own (exclusive)
  neither                         untouched: the job gets no GPU (with the
                                  plugin's default=, that quota as if it
                                  were --gpu-mem; whole GPUs without
                                  --gpu-mem get no quota from default=)
  --gres=shard:N or mps           refused: ask --gpu-mem instead
  --gpu-mem larger than every GPU of the partition (or of the nodes the job
  names with -w): refused, naming the largest GPU.
  --gpu-compute/--gpu-compute-max above what the site allows (by default
  the job's quota's fraction of the GPU; gpuslice.site below): refused,
  saying what is allowed.

Whole GPUs get a node of their own before Slurm 23.11.5, which gives a
gres/gpu job a GPU whose shards other jobs use (a gres/shard job is never
placed on a GPU a gres/gpu job holds); from 23.11.5 on they share the node
(gpuslice.whole_gpus_share_node below; the site's whole_gpus setting
overrides).

The SPANK plugin passes --gpu-mem (in bytes) as GPU_MEM=<bytes> in the job's
spank_job_env. GPU sizes come from the NodeName lines of slurm.conf
(Gres=gpu:N,shard:M: M/N MiB per GPU).

The decisions are pure functions of their arguments (gpuslice.translate and
the parsers below): tests call them with lua5.1 outside slurmctld.
]]

local gpuslice = {}

--[[
Site settings: the GPU time share of jobs (docs/slurm.md, "GPU time
shares"). The nodes' gpusliced applies the same policy again to every
job's session, from the compute_* keys of its gpusliced.yaml; this script
reads those keys from the same file on the controller (config below) when
it is there, over the defaults here. Copy the nodes' gpusliced.yaml to the
controller rather than editing this script.

  compute_default     weight of a job that asks for none: "proportional"
                      (its quota's fraction of the GPU), a percent ("25")
                      or "off" (never held). Applied on the node.
  compute_user_share  true: a job may ask a weight of its own
                      (--gpu-compute), up to compute_max; false: every job
                      gets compute_default, and --gpu-compute is refused.
  compute_max         the most weight a job may ask: "proportional" (no
                      more than its quota's fraction of the GPU) or a
                      percent ("100": any); compute_default is always
                      allowed.
  compute_cap         every job's ceiling on its GPU time, held even when
                      it is alone: "none", a percent or "proportional";
                      a job may ask a lower one (--gpu-compute-max).
  config              gpusliced.yaml, whose compute_* keys override these
                      (GPUSLICE_CONFIG in slurmctld's environment, as
                      for gpusliced, else /etc/gpuslice/gpusliced.yaml).
  whole_gpus          where jobs of whole GPUs run: "auto" (beside other
                      jobs where this Slurm keeps a GPU held as gres/gpu
                      away from shards, 23.11.5 on; else a node of their
                      own), "share" or "node". Not in gpusliced.yaml:
                      GPUSLICE_WHOLE_GPUS in slurmctld's environment, else
                      here; docs/slurm.md, "Whole GPUs".
]]
gpuslice.site = {
	compute_default = "proportional",
	compute_user_share = true,
	compute_max = "proportional",
	compute_cap = "none",
	config = os.getenv("GPUSLICE_CONFIG") or "/etc/gpuslice/gpusliced.yaml",
	whole_gpus = os.getenv("GPUSLICE_WHOLE_GPUS") or "auto",
}

-- site with the compute_* keys of gpusliced.yaml's lines (flat "key:
-- value" lines, as gpusliced reads them) over it.
function gpuslice.parse_site(lines, site)
	local out = {}
	for k, v in pairs(site) do
		out[k] = v
	end
	for _, line in ipairs(lines) do
		local k, v = string.match(line, "^(compute_[%w_]+)%s*:%s*(.-)%s*$")
		if k ~= nil and site[k] ~= nil then
			v = string.gsub(v, "%s+#.*$", "")
			v = string.match(v, '^"(.*)"$') or string.match(v, "^'(.*)'$") or v
			if k == "compute_user_share" then
				local b = ({["true"] = true, yes = true, on = true, ["false"] = false, no = false, off = false})[string.lower(v)]
				if b ~= nil then
					v = b
				end
			end
			out[k] = v
		end
	end
	return out
end

-- gpuslice.site, over which gpusliced.yaml's compute_* keys when the file
-- is there.
function gpuslice.load_site()
	local f = io.open(gpuslice.site.config or "", "r")
	if f == nil then
		return gpuslice.site
	end
	local lines = {}
	for line in f:lines() do
		table.insert(lines, line)
	end
	f:close()
	return gpuslice.parse_site(lines, gpuslice.site)
end

local MiB = 1048576

-- The job_desc fields through which Slurm passes GPU requests.
gpuslice.tres_fields = {"tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket"}

-- Sizes as people read them: 8GiB, 512MiB.
function gpuslice.format_mib(mib)
	if mib >= 1024 * 1024 and mib % (1024 * 1024) == 0 then
		return string.format("%dTiB", mib / (1024 * 1024))
	elseif mib >= 1024 and mib % 1024 == 0 then
		return string.format("%dGiB", mib / 1024)
	end
	return string.format("%dMiB", mib)
end

-- GPU_MEM=<bytes> from spank_job_env (a 0-indexed table of NAME=VALUE).
-- Returns the byte count, nil when absent, or nil and an error.
function gpuslice.gpu_mem_from_env(env)
	if env == nil then
		return nil
	end
	for _, kv in pairs(env) do
		if type(kv) == "string" then
			local v = string.match(kv, "^GPU_MEM=(.*)$")
			if v ~= nil then
				if not string.match(v, "^%d+$") or tonumber(v) == 0 then
					return nil, "invalid GPU_MEM '" .. v .. "' in the job's SPANK environment"
				end
				return tonumber(v)
			end
		end
	end
	return nil
end

-- Whether GPU_MEM is plugstack.conf's default= rather than the job's
-- --gpu-mem: the plugin sets GPU_MEM_DEFAULT=1 beside it then.
function gpuslice.gpu_mem_is_default(env)
	if env == nil then
		return false
	end
	for _, kv in pairs(env) do
		if kv == "GPU_MEM_DEFAULT=1" then
			return true
		end
	end
	return false
end

--[[
The whole-GPU note. plugstack.conf's default= is a quota for jobs given a
share of a GPU; a job given whole GPUs without --gpu-mem gets no session.
The Prolog on each node must tell the two apart without asking slurmctld
(Slurm gives it the same GPU variables for both), and this script cannot
add to the job's SPANK environment. What it can set and every Slurm
release (22.05 on) hands the Prolog is the job's comment
(SLURM_JOB_COMMENT): a job given whole GPUs whose quota is the default has
its comment end with the note, after the user's own comment and a space.
The note is removed from every comment a user writes, at submission and
in later changes (scontrol update comment=), and a user's change keeps
the note as the job had it: only this script puts it there. The Prolog
trusts it only for a job whose quota is the default.
]]
gpuslice.whole_gpus_note = "gpuslice=whole-gpus"

-- The longest comment slurmctld accepts (job_mgr.c, _test_job_desc_fields).
gpuslice.comment_max = 1024

-- Whether the job asks for whole GPUs (gres/gpu in any of its TRES fields).
function gpuslice.asks_whole_gpus(req)
	for _, field in ipairs(gpuslice.tres_fields) do
		for _, g in ipairs(gpuslice.parse_gres(req[field])) do
			if g.name == "gpu" then
				return true
			end
		end
	end
	return false
end

-- comment without the note, however often it appears (removed until none
-- is left, so that no removal joins two pieces into a new one), and
-- without the blanks around it at its ends; second result: whether a note
-- was removed.
function gpuslice.comment_without_note(comment)
	local note = gpuslice.whole_gpus_note
	local s, removed = comment or "", false
	while true do
		local i, j = string.find(s, note, 1, true)
		if i == nil then
			break
		end
		s = string.sub(s, 1, i - 1) .. string.sub(s, j + 1)
		removed = true
	end
	if removed then
		s = string.match(s, "^%s*(.-)%s*$")
	end
	return s, removed
end

-- Whether a comment ends with the note (as comment_with_note writes it).
function gpuslice.comment_has_note(comment)
	local note = gpuslice.whole_gpus_note
	return comment == note or (comment ~= nil and string.sub(comment, -(#note + 1)) == " " .. note)
end

-- The comment Slurm keeps: the user's comment without the note, then the
-- note when whole. Returns nil and the message for the user when the
-- result is longer than slurmctld accepts.
function gpuslice.comment_with_note(comment, whole)
	local s = gpuslice.comment_without_note(comment)
	if whole then
		if s == "" then
			s = gpuslice.whole_gpus_note
		else
			s = s .. " " .. gpuslice.whole_gpus_note
		end
	end
	if whole and #s > gpuslice.comment_max then
		return nil, string.format("gpuslice: --comment is too long: a job given whole GPUs without --gpu-mem " ..
			"carries the note '%s' after its comment, and Slurm keeps at most %d characters; " ..
			"shorten the comment to %d", gpuslice.whole_gpus_note, gpuslice.comment_max,
			gpuslice.comment_max - #gpuslice.whole_gpus_note - 1)
	end
	return s
end

-- GPU_COMPUTE (a percent 1-100, "proportional" or "off") and
-- GPU_COMPUTE_MAX (a percent 1-100) from spank_job_env, as the plugin set
-- them from --gpu-compute / --gpu-compute-max or plugstack.conf. Returns
-- nil when both are valid or absent, else the message for the user.
-- Shares are enforced on the node, not scheduled: nothing to translate.
function gpuslice.gpu_compute_error(env)
	if env == nil then
		return nil
	end
	for _, kv in pairs(env) do
		if type(kv) == "string" then
			local name, v = string.match(kv, "^(GPU_COMPUTE[_MAX]*)=(.*)$")
			if name == "GPU_COMPUTE" or name == "GPU_COMPUTE_MAX" then
				local n = string.match(v, "^%d+$") and tonumber(v)
				local word = name == "GPU_COMPUTE" and (v == "proportional" or v == "off")
				if not word and (n == nil or n < 1 or n > 100) then
					local opt = name == "GPU_COMPUTE" and "--gpu-compute" or "--gpu-compute-max"
					return "gpuslice: invalid " .. opt .. " '" .. v .. "': expected a percent of the GPU from 1 to 100"
				end
			end
		end
	end
	return nil
end

-- A bound of the site's settings: {proportional = true}, {percent = n}, or
-- {} for none ("none" where none_ok, "off" where off_ok); nil and an
-- error for anything else.
function gpuslice.share_bound(v, name, none_ok, off_ok)
	if v == "proportional" then
		return {proportional = true}
	elseif none_ok and (v == nil or v == "" or v == "none") then
		return {}
	elseif off_ok and v == "off" then
		return {off = true}
	end
	local n = string.match(tostring(v), "^(%d+)%%?$")
	n = tonumber(n)
	if n == nil or n < 1 or n > 100 then
		local want = "proportional or a percent 1-100"
		if none_ok then
			want = "proportional, a percent 1-100 or none"
		elseif off_ok then
			want = "proportional, a percent 1-100 or off"
		end
		return nil, "gpuslice: this cluster's setting " .. name .. ": '" .. tostring(v) .. "': expected " .. want ..
			" (job_submit.lua or the controller's gpusliced.yaml; tell your admin)"
	end
	return {percent = n}
end

-- A bound in percent of a GPU for a quota of fraction f of it (nil: none).
local function bound_of(b, f)
	if b.off then
		return math.huge
	elseif b.proportional then
		return 100 * f
	end
	return b.percent
end

-- A percent as people read it: 10%, 0.6%.
local function fmt_pct(x)
	if x == math.floor(x) then
		return string.format("%d%%", x)
	end
	return string.format("%.1f%%", math.floor(x * 10) / 10)
end

--[[
compute_policy_error(env, site, quota_mib, gpu_mib, pname): the message
for the user when the share asked in spank_job_env (GPU_COMPUTE,
GPU_COMPUTE_MAX; valid as gpu_compute_error checks) is more than the site
allows, else nil. quota_mib: the job's quota (nil: it gets none, and no
share either); gpu_mib: the largest GPU it may be given, whose fraction
its quota is the smallest (a job may land on it); pname: where, for
messages. The node (gpusliced) applies the same policy again.
]]
function gpuslice.compute_policy_error(env, site, quota_mib, gpu_mib, pname)
	local default, err = gpuslice.share_bound(site.compute_default, "compute_default", false, true)
	if default == nil then
		return err
	end
	local most, cap
	most, err = gpuslice.share_bound(site.compute_max, "compute_max", false, false)
	if most == nil then
		return err
	end
	cap, err = gpuslice.share_bound(site.compute_cap, "compute_cap", true, false)
	if cap == nil then
		return err
	end
	if type(site.compute_user_share) ~= "boolean" then
		return "gpuslice: this cluster's setting compute_user_share: '" .. tostring(site.compute_user_share) ..
			"': expected true or false (job_submit.lua or the controller's gpusliced.yaml; tell your admin)"
	end
	if quota_mib == nil then
		return nil
	end
	local share, max
	for _, kv in pairs(env or {}) do
		if type(kv) == "string" then
			share = string.match(kv, "^GPU_COMPUTE=(.*)$") or share
			max = string.match(kv, "^GPU_COMPUTE_MAX=(.*)$") or max
		end
	end
	local f = 1
	if gpu_mib ~= nil and gpu_mib > 0 then
		f = math.min(quota_mib / gpu_mib, 1)
	end
	local whose = string.format("the job's quota's share of the GPU: %s of %s, the largest GPU in %s",
		gpuslice.format_mib(quota_mib), gpuslice.format_mib(gpu_mib or quota_mib), pname)
	if share ~= nil and share ~= "" then
		if site.compute_user_share == false then
			return "gpuslice: --gpu-compute is not accepted here: this cluster sets each job's GPU time share; " ..
				"leave --gpu-compute out"
		end
		local asked = bound_of(gpuslice.share_bound(share, "", false, true) or {off = true}, f)
		local allowed, why = bound_of(most, f), "this cluster's maximum"
		if most.proportional then
			why = whose
		end
		if bound_of(default, f) > allowed then
			allowed, why = bound_of(default, f), "this cluster's default"
			if default.proportional then
				why = whose
			end
		end
		if asked > allowed + 1e-9 then
			local ask = "ask for less, or leave --gpu-compute out"
			if allowed < 1 then
				ask = "no percent is that small: leave --gpu-compute out"
			end
			return string.format("gpuslice: --gpu-compute=%s is more than this cluster allows: at most %s (%s); %s",
				share, fmt_pct(allowed), why, ask)
		end
	end
	if max ~= nil and max ~= "" and (cap.proportional or cap.percent ~= nil) then
		local ceiling, why = cap.percent, "this cluster's ceiling"
		if cap.proportional then
			ceiling, why = math.max(1, math.ceil(100 * f - 1e-9)), whose .. ", rounded up"
		end
		if tonumber(max) > ceiling then
			return string.format("gpuslice: --gpu-compute-max=%s is more than this cluster allows: at most %d%% (%s); " ..
				"ask for less, or leave --gpu-compute-max out", max, ceiling, why)
		end
	end
	return nil
end

-- MiB asked for a byte count, rounded up.
function gpuslice.mib_ceil(bytes)
	return math.ceil(bytes / MiB)
end

-- A gres count as Slurm writes it: a number with an optional K, M or G
-- (powers of 1024: Slurm prints 16384 shards as 16K, and slurm.conf
-- accepts either); nil when s is not a count.
function gpuslice.gres_count(s)
	local n, suffix = string.match(s or "", "^(%d+)([KkMmGg]?)$")
	if n == nil then
		return nil
	end
	local mult = {[""] = 1, k = 1024, m = 1024 * 1024, g = 1024 * 1024 * 1024}
	return tonumber(n) * mult[string.lower(suffix)]
end

-- A TRES/gres list ("gres:gpu:2,gres:shard:10", "gres/gpu:a100:1", "gpu:1")
-- as a list of {name=, type=, count=, raw=}. Count defaults to 1.
function gpuslice.parse_gres(s)
	local out = {}
	if s == nil or s == "" then
		return out
	end
	for item in string.gmatch(s, "[^,]+") do
		local rest = string.gsub(item, "^gres[:/]", "")
		local parts = {}
		for p in string.gmatch(rest, "[^:]+") do
			table.insert(parts, p)
		end
		local e = {name = parts[1], raw = item, count = 1}
		if #parts == 2 then
			local n = gpuslice.gres_count(parts[2])
			if n ~= nil then
				e.count = n
			else
				e.type = parts[2]
			end
		elseif #parts >= 3 then
			e.type = parts[2]
			e.count = gpuslice.gres_count(string.match(parts[3], "^[^(]*")) or 1
		end
		table.insert(out, e)
	end
	return out
end

-- Expands a Slurm hostlist: "tn[1-3,5],gpu01" -> {"tn1","tn2","tn3","tn5","gpu01"}.
function gpuslice.expand_hostlist(s)
	local out = {}
	if s == nil then
		return out
	end
	-- split on commas outside brackets
	local items, depth, cur = {}, 0, ""
	for ch in string.gmatch(s, ".") do
		if ch == "[" then
			depth = depth + 1
		elseif ch == "]" then
			depth = depth - 1
		end
		if ch == "," and depth == 0 then
			table.insert(items, cur)
			cur = ""
		else
			cur = cur .. ch
		end
	end
	if cur ~= "" then
		table.insert(items, cur)
	end
	for _, item in ipairs(items) do
		local pre, ranges, post = string.match(item, "^(.-)%[(.-)%](.*)$")
		if pre == nil then
			table.insert(out, item)
		else
			for r in string.gmatch(ranges, "[^,]+") do
				local a, b = string.match(r, "^(%d+)-(%d+)$")
				if a == nil then
					table.insert(out, pre .. r .. post)
				else
					local width = string.len(a)
					for i = tonumber(a), tonumber(b) do
						table.insert(out, pre .. string.format("%0" .. width .. "d", i) .. post)
					end
				end
			end
		end
	end
	return out
end

local function kv_fields(line)
	local f = {}
	for k, v in string.gmatch(line, "(%w+)=(%S+)") do
		f[string.lower(k)] = v
	end
	return f
end

-- Reads slurm.conf lines: GPU MiB per node (from Gres=gpu:N,shard:M) and
-- partitions. Returns {nodes = {name = {gpus=, gpu_mib=}}, partitions =
-- {name = {nodes = {...}, default = bool}}, default_partition = name}.
function gpuslice.parse_conf(lines)
	local conf = {nodes = {}, partitions = {}, node_order = {}}
	for _, line in ipairs(lines) do
		line = string.gsub(line, "#.*$", "")
		local f = kv_fields(line)
		if f.nodename ~= nil and f.nodename ~= "DEFAULT" then
			local gpus, shards = 0, 0
			for _, g in ipairs(gpuslice.parse_gres(f.gres)) do
				if g.name == "gpu" then
					gpus = gpus + g.count
				elseif g.name == "shard" then
					shards = shards + g.count
				end
			end
			for _, n in ipairs(gpuslice.expand_hostlist(f.nodename)) do
				local node = {gpus = gpus}
				if gpus > 0 and shards > 0 then
					node.gpu_mib = math.floor(shards / gpus)
				end
				if conf.nodes[n] == nil then
					table.insert(conf.node_order, n)
				end
				conf.nodes[n] = node
			end
		elseif f.partitionname ~= nil and f.partitionname ~= "DEFAULT" then
			local p = {default = string.upper(f.default or "") == "YES", nodes = {}}
			if f.nodes == "ALL" then
				p.all = true
			else
				p.nodes = gpuslice.expand_hostlist(f.nodes)
			end
			conf.partitions[f.partitionname] = p
			if p.default then
				conf.default_partition = f.partitionname
			end
		end
	end
	return conf
end

-- Per-GPU MiB of the nodes a job names (--nodelist/-w, a hostlist), and
-- a description for messages. Nodes without GPUs count as none.
function gpuslice.node_gpu_sizes(conf, req_nodes)
	local sizes = {}
	for _, n in ipairs(gpuslice.expand_hostlist(req_nodes)) do
		local node = conf.nodes[n]
		if node ~= nil and node.gpu_mib ~= nil then
			table.insert(sizes, node.gpu_mib)
		end
	end
	return sizes, "nodes " .. req_nodes
end

-- Per-GPU MiB of every node with GPUs in the job's partition(s) (a
-- comma-separated list, or nil for the default partition). Returns the
-- list of sizes and the partition name(s) for messages.
function gpuslice.partition_gpu_sizes(conf, partition)
	local names = {}
	if partition == nil or partition == "" then
		if conf.default_partition == nil then
			return {}, "(default)"
		end
		names = {conf.default_partition}
	else
		for p in string.gmatch(partition, "[^,]+") do
			table.insert(names, p)
		end
	end
	local sizes = {}
	for _, name in ipairs(names) do
		local p = conf.partitions[name]
		if p ~= nil then
			local nodes = p.nodes
			if p.all then
				nodes = conf.node_order
			end
			for _, n in ipairs(nodes) do
				local node = conf.nodes[n]
				if node ~= nil and node.gpu_mib ~= nil then
					table.insert(sizes, node.gpu_mib)
				end
			end
		end
	end
	return sizes, table.concat(names, ",")
end

local function append(list, item)
	if list == nil or list == "" then
		return item
	end
	return list .. "," .. item
end

--[[
translate(req, sizes, pname) decides what slurmctld schedules.

req: {gpu_mem = bytes or nil, gpu_mem_default = true when gpu_mem is
      plugstack.conf's default= (it applies to shares of a GPU only: a job
      given whole GPUs gets no quota), tres_per_node, tres_per_job,
      tres_per_task, tres_per_socket, prefix = "gres:" (Slurm 22.05) or "gres/" (23.02 on),
      see gpuslice.tres_prefix; "gres:" when nil; share_node = true when
      whole GPUs may run beside other jobs, see
      gpuslice.whole_gpus_share_node; a node of their own when nil}
sizes: per-GPU MiB of the nodes the job may use; pname: where they are, for
messages ("partition gpu", "nodes tn1").

Returns a change table {tres_per_node=, set=bool, whole=bool,
exclusive=bool, why=} (when set, tres_per_node replaces the job's; whole:
the job asks whole GPUs; exclusive: a node of its own), or nil and the
message for the user.
]]
function gpuslice.translate(req, sizes, pname)
	local gpus = false
	for _, field in ipairs(gpuslice.tres_fields) do
		for _, g in ipairs(gpuslice.parse_gres(req[field])) do
			if g.name == "shard" or g.name == "mps" then
				return nil, "gpuslice: --gres=" .. g.name .. " is not accepted here: ask for GPU memory with " ..
					"--gpu-mem=SIZE (e.g. --gpu-mem=8G), the scheduler places the job by it"
			end
			if g.name == "gpu" then
				gpus = true
			end
		end
	end
	local largest = 0
	for _, s in ipairs(sizes) do
		if s > largest then
			largest = s
		end
	end

	local where = ": a node of its own"
	if req.share_node then
		where = ": beside other jobs"
	end
	if req.gpu_mem == nil or (gpus and req.gpu_mem_default) then
		if not gpus then
			return {set = false, why = "no GPU asked"}
		end
		return {set = false, whole = true, exclusive = not req.share_node, why = "whole GPUs" .. where}
	end

	local mib = gpuslice.mib_ceil(req.gpu_mem)
	if largest == 0 then
		return nil, "gpuslice: --gpu-mem: " .. pname .. " has no GPU known to gpuslice " ..
			"(no Gres=gpu:N,shard:M in slurm.conf)"
	end
	if mib > largest then
		return nil, string.format("gpuslice: --gpu-mem=%s is larger than any GPU in %s: the largest has %s",
			gpuslice.format_mib(mib), pname, gpuslice.format_mib(largest))
	end
	if gpus then
		return {set = false, whole = true, exclusive = not req.share_node,
			why = gpuslice.format_mib(mib) .. " on each of its whole GPUs" .. where}
	end
	return {set = true, tres_per_node = append(req.tres_per_node, (req.prefix or "gres:") .. "shard:" .. mib),
		why = gpuslice.format_mib(mib) .. " of one GPU"}
end

--[[
tres_prefix(req, slurm_table) is how this Slurm writes a gres in the TRES
strings of a job: "gres:gpu:1" up to 22.05, "gres/gpu:1" from 23.02 on
(which refuses the old form: "Invalid Trackable RESource (TRES)
specification"). The job's own TRES strings say it when it has any; else
the Slurm release does: 23.02 also began to give job_submit.lua every Slurm
error code (slurm.ESLURM_INVALID_GRES), which 22.05 does not.
]]
function gpuslice.tres_prefix(req, slurm_table)
	for _, field in ipairs(gpuslice.tres_fields) do
		local v = req[field]
		if v ~= nil and string.find(v, "gres/", 1, true) then
			return "gres/"
		elseif v ~= nil and string.find(v, "gres:", 1, true) then
			return "gres:"
		end
	end
	if slurm_table ~= nil and slurm_table.ESLURM_INVALID_GRES ~= nil then
		return "gres/"
	end
	return "gres:"
end

--[[
Whole GPUs beside shards. A GPU a job holds as gres/gpu must carry no other
job's shards. Slurm 22.05 gives a gres/gpu job a GPU whose shards other
jobs use (a shard job on GPU 0, then --gres=gpu:1 was given GPU 0 too);
23.11.5 fixed it (its NEWS: "Fix issue where you could have a gpu
allocated as well as a shard on that gpu allocated at the same time").
tests/slurm's TestGresGPUApartFromShards measures it on every release the
project supports. So whole GPUs share the node from 23.11.5 on, and get a
node of their own before.

job_submit.lua has no version constant; what it sees of the release:
- the slurm table (SchedMD's src/lua/slurm_lua.c): every Slurm error code
  (slurm.ESLURM_INVALID_GRES) from 23.02 on, slurm.STEPMGR_ENABLED from
  24.05 on;
- between the two, where the table tells 23.11.5 from nothing older, the
  release slurmctld names itself by ("slurmctld version 23.11.11
  started"): a string of its executable, /proc/self/exe, read then only
  (about 0.1 s for SchedMD's 23.11.11, once per load of this script).
A 23.02-to-23.11 slurmctld whose release cannot be read is taken to lack
the fix (the site's whole_gpus = "share" says otherwise).
]]

-- The releases the slurm table says this is: "22.05" (22.05 or older),
-- "23.02" (23.02 to 23.11) or "24.05" (24.05 or later).
function gpuslice.release_family(slurm_table)
	if slurm_table == nil or slurm_table.ESLURM_INVALID_GRES == nil then
		return "22.05"
	elseif slurm_table.STEPMGR_ENABLED == nil then
		return "23.02"
	end
	return "24.05"
end

-- Every release named in data, a piece of an executable: the strings
-- "YY.MM.P" between NUL bytes, added to out ({["23.11.11"] = true}).
function gpuslice.release_strings(data, out)
	out = out or {}
	local init = 1
	while true do
		local s, e, v = string.find(data, "%z(%d%d%.%d%d%.%d+)%z", init)
		if s == nil then
			return out
		end
		out[v] = true
		init = e -- the closing NUL may open the next string
	end
end

-- Whether release v ("23.11.5") is min or later.
function gpuslice.release_at_least(v, min)
	local a = {string.match(v, "^(%d+)%.(%d+)%.(%d+)$")}
	local b = {string.match(min, "^(%d+)%.(%d+)%.(%d+)$")}
	for i = 1, 3 do
		local x, y = tonumber(a[i]), tonumber(b[i])
		if x == nil or y == nil then
			return false
		elseif x ~= y then
			return x > y
		end
	end
	return true
end

-- Whether the Slurm of this family (release_family) keeps a GPU held as
-- gres/gpu away from shards, and the release as known, for the log.
-- names: the releases slurmctld's executable names (release_strings),
-- read for 23.02 to 23.11 only; one of that family must be the only one.
function gpuslice.gres_gpu_apart(family, names)
	if family == "22.05" then
		return false, "Slurm 22.05 or older"
	elseif family == "24.05" then
		return true, "Slurm 24.05 or later"
	end
	local found
	for v in pairs(names or {}) do
		if gpuslice.release_at_least(v, "23.02.0") and not gpuslice.release_at_least(v, "24.05.0") then
			if found ~= nil then
				return false, "Slurm 23.02 to 23.11 (slurmctld names more than one)"
			end
			found = v
		end
	end
	if found == nil then
		return false, "Slurm 23.02 to 23.11 (slurmctld does not say which)"
	end
	return gpuslice.release_at_least(found, "23.11.5"), "Slurm " .. found
end

--[[
whole_gpus_share_node(setting, apart, release): whether jobs of whole GPUs
run beside other jobs (true) or on a node of their own (false), and why
(for slurmctld's log). setting: the site's whole_gpus ("auto", "share",
"node"); apart, release: gres_gpu_apart's. nil and the message for the
user when the setting is none of these.
]]
function gpuslice.whole_gpus_share_node(setting, apart, release)
	if setting == "share" then
		return true, "whole_gpus = share"
	elseif setting == "node" then
		return false, "whole_gpus = node"
	elseif setting ~= nil and setting ~= "" and setting ~= "auto" then
		return nil, "gpuslice: this cluster's setting whole_gpus: '" .. tostring(setting) ..
			"': expected auto, share or node (job_submit.lua or GPUSLICE_WHOLE_GPUS; tell your admin)"
	elseif apart then
		return true, release .. " keeps a GPU held as gres/gpu away from shards"
	end
	return false, release .. ": taken to give a GPU as gres/gpu while its shards are in use, as before 23.11.5"
end

-- The releases /proc/self/exe names (slurmctld's executable, in
-- slurmctld), read a MiB at a time.
local function executable_releases()
	local names = {}
	local f = io.open("/proc/self/exe", "rb")
	if f == nil then
		return names
	end
	local tail = ""
	while true do
		local chunk = f:read(1048576)
		if chunk == nil then
			break
		end
		local data = tail .. chunk
		gpuslice.release_strings(data, names)
		tail = string.sub(data, -32)
	end
	f:close()
	return names
end

-- gres_gpu_apart for the slurmctld running this script, found once per
-- load of the script (and family: tests change the slurm table).
local release_found = {}
function gpuslice.slurmctld_gres_gpu_apart(slurm_table)
	local family = gpuslice.release_family(slurm_table)
	if release_found[family] == nil then
		local names = {}
		if family == "23.02" then
			names = executable_releases()
		end
		local apart, release = gpuslice.gres_gpu_apart(family, names)
		release_found[family] = {apart = apart, release = release}
	end
	return release_found[family].apart, release_found[family].release
end

-- slurm.conf next to this script (Slurm requires job_submit.lua to sit in
-- the directory of slurm.conf), and the files it includes.
local function script_dir()
	local src = debug.getinfo(1, "S").source
	return string.match(src, "^@(.*)/[^/]*$") or "."
end

local function read_conf_lines(path, out, depth)
	local f = io.open(path, "r")
	if f == nil then
		return out
	end
	local dir = string.match(path, "^(.*)/[^/]*$") or "."
	for line in f:lines() do
		local inc = string.match(line, "^%s*[Ii]nclude%s+(%S+)")
		if inc ~= nil and depth < 4 then
			if string.sub(inc, 1, 1) ~= "/" then
				inc = dir .. "/" .. inc
			end
			read_conf_lines(inc, out, depth + 1)
		else
			table.insert(out, line)
		end
	end
	f:close()
	return out
end

function gpuslice.load_conf()
	local path = os.getenv("SLURM_CONF") or (script_dir() .. "/slurm.conf")
	return gpuslice.parse_conf(read_conf_lines(path, {}, 0))
end

-- Apply a decision to job_desc (slurmctld's object).
local function apply(job_desc, change)
	if change.set then
		job_desc.tres_per_node = change.tres_per_node
	end
	if change.exclusive then
		job_desc.shared = 0
	end
end

function slurm_job_submit(job_desc, part_list, submit_uid)
	local mem, err = gpuslice.gpu_mem_from_env(job_desc.spank_job_env)
	if err ~= nil then
		slurm.log_user("gpuslice: " .. err)
		return slurm.ERROR
	end
	-- log_user formats its first argument: messages go through "%s".
	local cerr = gpuslice.gpu_compute_error(job_desc.spank_job_env)
	if cerr ~= nil then
		slurm.log_user("%s", cerr)
		return slurm.ERROR
	end
	local conf = gpuslice.load_conf()
	-- A job that names its nodes can only use their GPUs (Slurm would keep
	-- a request none of them can hold pending forever).
	local sizes, pname
	if job_desc.req_nodes ~= nil and job_desc.req_nodes ~= "" then
		sizes, pname = gpuslice.node_gpu_sizes(conf, job_desc.req_nodes)
	else
		sizes, pname = gpuslice.partition_gpu_sizes(conf, job_desc.partition)
		pname = "partition " .. pname
	end
	local req = {gpu_mem = mem, gpu_mem_default = gpuslice.gpu_mem_is_default(job_desc.spank_job_env),
		tres_per_node = job_desc.tres_per_node, tres_per_job = job_desc.tres_per_job,
		tres_per_task = job_desc.tres_per_task, tres_per_socket = job_desc.tres_per_socket}
	req.prefix = gpuslice.tres_prefix(req, slurm)
	-- Whole GPUs beside other jobs where this Slurm keeps them apart.
	local site = gpuslice.load_site()
	local share, why = gpuslice.whole_gpus_share_node(site.whole_gpus, gpuslice.slurmctld_gres_gpu_apart(slurm))
	if share == nil then
		slurm.log_user("%s", why)
		return slurm.ERROR
	end
	req.share_node = share
	local change, msg = gpuslice.translate(req, sizes, pname)
	if change == nil then
		slurm.log_user(msg)
		return slurm.ERROR
	end
	if change.whole then
		change.why = change.why .. " (" .. why .. ")"
	end
	-- The GPU time share asked, against the site's settings: only a job
	-- with a quota gets a session, and with it a share.
	local quota_mib
	if mem ~= nil and not (change.whole and req.gpu_mem_default) then
		quota_mib = gpuslice.mib_ceil(mem)
	end
	local largest = 0
	for _, sz in ipairs(sizes) do
		largest = math.max(largest, sz)
	end
	cerr = gpuslice.compute_policy_error(job_desc.spank_job_env, site, quota_mib, largest, pname)
	if cerr ~= nil then
		slurm.log_user("%s", cerr)
		return slurm.ERROR
	end
	-- The job's comment: the user's without the whole-GPU note, then the
	-- note when the job has whole GPUs and the default quota (the Prolog
	-- gives it no session).
	local comment, cmsg = gpuslice.comment_with_note(job_desc.comment,
		mem ~= nil and req.gpu_mem_default and gpuslice.asks_whole_gpus(req))
	if comment == nil then
		slurm.log_user("%s", cmsg)
		return slurm.ERROR
	end
	if comment ~= (job_desc.comment or "") then
		if select(2, gpuslice.comment_without_note(job_desc.comment)) then
			slurm.log_user("gpuslice: '%s' was removed from the job's comment: only the scheduler writes it",
				gpuslice.whole_gpus_note)
		end
		job_desc.comment = comment
	end
	apply(job_desc, change)
	if change.set or change.whole then
		slurm.log_info("gpuslice: job from uid %u: %s (tres_per_node=%s)", submit_uid, change.why,
			tostring(job_desc.tres_per_node))
	end
	return slurm.SUCCESS
end

-- A user may not change GPU requests after submission (that would undo the
-- translation); root may.
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
	if modify_uid == 0 then
		return slurm.SUCCESS
	end
	for _, field in ipairs(gpuslice.tres_fields) do
		if job_desc[field] ~= nil then
			-- Slurm 22.05 discards log_user here: the user sees scontrol's
			-- "Unspecified error"; the reason goes to slurmctld's log.
			slurm.log_info("gpuslice: uid %u may not change the GPU requests of job %u (%s): they are fixed at submission",
				modify_uid, job_rec.job_id, field)
			return slurm.ERROR
		end
	end
	-- A new comment keeps the whole-GPU note as the job has it: a user can
	-- neither add it (to a share of a GPU: no default quota) nor remove it.
	if job_desc.comment ~= nil then
		local comment, cmsg = gpuslice.comment_with_note(job_desc.comment, gpuslice.comment_has_note(job_rec.comment))
		if comment == nil then
			slurm.log_user("%s", cmsg)
			slurm.log_info("gpuslice: uid %u: the new comment of job %u is too long with the whole-GPU note", modify_uid,
				job_rec.job_id)
			return slurm.ERROR
		end
		if comment ~= job_desc.comment then
			slurm.log_info("gpuslice: uid %u's new comment of job %u keeps the whole-GPU note as the job had it",
				modify_uid, job_rec.job_id)
			job_desc.comment = comment
		end
	end
	return slurm.SUCCESS
end

-- slurmctld checks the script's return value when it loads it; tests
-- (lua5.1 outside slurmctld, where there is no slurm table) get the module.
if slurm ~= nil and slurm.SUCCESS ~= nil then
	return slurm.SUCCESS
end
return gpuslice
