-- job_submit.lua's checks of --gpu-compute / --gpu-compute-max, run with
-- lua5.1 outside slurmctld:
--   SLURM_CONF=<slurm.conf> GPUSLICE_CONFIG=<gpusliced.yaml> \
--   lua5.1 job_submit_compute_test.lua <job_submit.lua>
-- SLURM_CONF names a slurm.conf whose default partition "gpu" has one
-- 80 GiB GPU (Gres=gpu:1,shard:81920), GPUSLICE_CONFIG a gpusliced.yaml
-- that sets compute_cap: 50, for the cases run through slurm_job_submit
-- itself.

local script = arg[1]
local gs = dofile(script)
local failures = 0
local function fail(name, msg)
	failures = failures + 1
	print("FAIL " .. name .. ": " .. msg)
end

-- The syntax, whatever the site allows.
local function check(name, env, ok)
	local err = gs.gpu_compute_error(env)
	if (err == nil) ~= ok then
		fail(name, tostring(err))
	end
end
check("none", {[0] = "GPU_MEM=1"}, true)
check("percent", {[0] = "GPU_MEM=1", [1] = "GPU_COMPUTE=25"}, true)
check("proportional and cap", {[0] = "GPU_COMPUTE=proportional", [1] = "GPU_COMPUTE_MAX=30"}, true)
check("off", {[0] = "GPU_COMPUTE=off"}, true)
check("zero", {[0] = "GPU_COMPUTE=0"}, false)
check("over 100", {[0] = "GPU_COMPUTE=101"}, false)
check("word as a cap", {[0] = "GPU_COMPUTE_MAX=proportional"}, false)
check("fraction", {[0] = "GPU_COMPUTE=12.5"}, false)
check("empty", {[0] = "GPU_COMPUTE="}, false)

-- The site's policy (gpuslice.compute_policy_error): a job may ask for
-- less than the site allows, never more. An 8 GiB quota of an 80 GiB GPU
-- is 10 % of it.
local GiB = 1024
local function site(over)
	local s = {}
	for k, v in pairs(gs.site) do
		s[k] = v
	end
	for k, v in pairs(over or {}) do
		s[k] = v
	end
	return s
end
local function policy(name, s, share, max, quota_mib, gpu_mib, want)
	local env, i = {}, 0
	if share ~= nil then
		env[i] = "GPU_COMPUTE=" .. share
		i = i + 1
	end
	if max ~= nil then
		env[i] = "GPU_COMPUTE_MAX=" .. max
	end
	local err = gs.compute_policy_error(env, s, quota_mib, gpu_mib, "partition gpu")
	if want == nil and err ~= nil then
		fail(name, "refused: " .. err)
	elseif want ~= nil and (err == nil or not string.find(err, want, 1, true)) then
		fail(name, "got " .. tostring(err) .. ", want a refusal saying '" .. want .. "'")
	end
end
local q8, g80 = 8 * GiB, 80 * GiB

-- The shipped settings: the weight follows the quota, at most its fraction.
local d = site()
if d.compute_default ~= "proportional" or d.compute_max ~= "proportional" or d.compute_user_share ~= true then
	fail("shipped settings", "compute_default, compute_max, compute_user_share are not proportional, proportional, true")
end
policy("nothing asked", d, nil, nil, q8, g80, nil)
policy("the quota's fraction", d, "10", nil, q8, g80, nil)
policy("less", d, "5", nil, q8, g80, nil)
policy("proportional asked", d, "proportional", nil, q8, g80, nil)
policy("one point more", d, "11", nil, q8, g80,
	"gpuslice: --gpu-compute=11 is more than this cluster allows: at most 10%")
policy("everyone's 100", d, "100", nil, q8, g80, "8GiB of 80GiB, the largest GPU in partition gpu")
policy("off: never held", d, "off", nil, q8, g80, "--gpu-compute=off is more than this cluster allows")
policy("a fraction below 1 %", d, "1", nil, 512, g80, "at most 0.6%")
policy("no quota: no session to share", d, "100", nil, nil, g80, nil)
policy("any ceiling without the site's", d, "5", "90", q8, g80, nil)

-- A site ceiling: a job may ask a lower one.
policy("ceiling under the site's", site({compute_cap = "50"}), nil, "40", q8, g80, nil)
policy("ceiling over the site's", site({compute_cap = "50"}), nil, "60", q8, g80,
	"--gpu-compute-max=60 is more than this cluster allows: at most 50%")
policy("proportional ceiling", site({compute_cap = "proportional"}), nil, "10", q8, g80, nil)
policy("over the proportional ceiling", site({compute_cap = "proportional"}), nil, "11", q8, g80,
	"--gpu-compute-max=11 is more than this cluster allows: at most 10%")
policy("ceiling of a tiny quota", site({compute_cap = "proportional"}), nil, "1", 512, g80, nil)

-- A fixed most, and a default above it for small quotas.
policy("at a fixed most", site({compute_max = "50"}), "50", nil, q8, g80, nil)
policy("over a fixed most", site({compute_max = "50"}), "51", nil, q8, g80, "at most 50%")
policy("under the default", site({compute_default = "25"}), "20", nil, q8, g80, nil)
policy("over the default", site({compute_default = "25"}), "26", nil, q8, g80, "at most 25%")
policy("default off: any", site({compute_default = "off"}), "100", nil, q8, g80, nil)

-- A site that sets every job's weight itself.
policy("no share of one's own", site({compute_user_share = false}), "5", nil, q8, g80,
	"gpuslice: --gpu-compute is not accepted here: this cluster sets each job's GPU time share")
policy("a lower ceiling all the same", site({compute_user_share = false, compute_cap = "50"}), nil, "20", q8, g80, nil)

-- The same keys as gpusliced.yaml writes them, over the script's.
local lines = {"# gpusliced configuration", "log_level: info", "compute_max: 50   # a fixed most",
	'compute_cap: "proportional"', "compute_user_share: false", "compute_unknown: 1", "  compute_default: off"}
local got = gs.parse_site(lines, gs.site)
if got.compute_max ~= "50" or got.compute_cap ~= "proportional" or got.compute_user_share ~= false or
	got.compute_default ~= "proportional" or got.compute_unknown ~= nil then
	fail("gpusliced.yaml's keys", "max " .. tostring(got.compute_max) .. ", cap " .. tostring(got.compute_cap) ..
		", user share " .. tostring(got.compute_user_share) .. ", default " .. tostring(got.compute_default))
end

-- Settings a site can get wrong are named.
for _, bad in ipairs({{compute_default = "most"}, {compute_max = "0"}, {compute_max = "off"}, {compute_cap = "101"},
	{compute_user_share = "maybe"}}) do
	local k, v = next(bad)
	local err = gs.compute_policy_error({}, site(bad), q8, g80, "partition gpu")
	if err == nil or not string.find(err, k, 1, true) then
		fail("bad setting " .. k .. "=" .. v, tostring(err))
	end
end

-- Through slurmctld's entry point, with the shipped settings under
-- GPUSLICE_CONFIG's compute_cap: 50: srun --gpu-mem=8G --gpu-compute=100
-- fails at submit with the message.
local said
slurm = {SUCCESS = 0, ERROR = -1, log_user = function(fmt, ...) said = string.format(fmt, ...) end,
	log_info = function() end}
dofile(script)
local function submit(name, env, want)
	said = nil
	local job = {spank_job_env = env, partition = "gpu"}
	local rc = slurm_job_submit(job, nil, 1000)
	if want == nil and rc ~= slurm.SUCCESS then
		fail(name, "refused: " .. tostring(said))
	elseif want ~= nil and (rc ~= slurm.ERROR or said == nil or not string.find(said, want, 1, true)) then
		fail(name, "returned " .. tostring(rc) .. " saying " .. tostring(said) .. "; want refused saying '" .. want .. "'")
	end
end
local mem8 = "GPU_MEM=" .. 8 * 1024 * 1024 * 1024
submit("submit: 100 %", {[0] = mem8, [1] = "GPU_COMPUTE=100"},
	"gpuslice: --gpu-compute=100 is more than this cluster allows: at most 10%")
submit("submit: the quota's fraction", {[0] = mem8, [1] = "GPU_COMPUTE=10"}, nil)
submit("submit: nothing asked", {[0] = mem8}, nil)
submit("submit: over the file's ceiling", {[0] = mem8, [1] = "GPU_COMPUTE_MAX=60"},
	"gpuslice: --gpu-compute-max=60 is more than this cluster allows: at most 50% (this cluster's ceiling)")

if failures > 0 then
	os.exit(1)
end
print("ok")
