-- job_submit.lua's check of --gpu-compute / --gpu-compute-max, run with
-- lua5.1 outside slurmctld: lua5.1 job_submit_compute_test.lua <job_submit.lua>

local gs = dofile(arg[1])
local failures = 0
local function check(name, env, ok)
	local err = gs.gpu_compute_error(env)
	if (err == nil) ~= ok then
		failures = failures + 1
		print("FAIL " .. name .. ": " .. tostring(err))
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
if failures > 0 then
	os.exit(1)
end
print("ok")
