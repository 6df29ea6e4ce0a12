/*
 * Graph memory nodes. The driver allocates a graph's memory when an
 * executable graph is launched, from the device's graph memory pool, and
 * keeps it reserved in that pool after the graph's free nodes (or the
 * executable graph's destruction) until cuDeviceGraphMemTrim gives the
 * unused part back. What is charged for a device is what its pool holds:
 * the driver's own figure, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, read
 * after every launch, trim and executable graph destruction (and charged
 * even over the quota when it grew behind the hooks' back: memory that
 * exists is counted).
 *
 * So that a launch over the quota is refused rather than found later, the
 * growth a launch may cause is reserved before it: the bytes of the
 * graph's allocation nodes (recorded by cuGraphAddMemAllocNode, carried to
 * the executable graph at instantiation) beyond what the pool has free. A
 * launch that does not fit fails with CUDA_ERROR_OUT_OF_MEMORY before the
 * driver sees it. Graphs whose allocations were not seen (stream capture)
 * are charged after the launch, on the current context's device (the
 * capture's); a graph with allocation nodes on several devices settles
 * every device after each launch. The graph and executable-graph tables fail
 * closed: a node or an instantiation that cannot be recorded is refused.
 */
#include "charge.h"
#include "gate.h"

#define GS_GRAPH_MIXED 1ull
#define GS_GRAPH_GRANULE (2ull << 20) /* allocation nodes on more than one device */

static pthread_mutex_t graph_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
	int g;
	uint64_t bytes;
} pool_charged[GS_MAX_ORDINALS]; /* graph_mu */
static unsigned char graph_full_warned;

void gs_graph_drop(void)
{
	pthread_mutex_init(&graph_mu, NULL);
	for (int d = 0; d < GS_MAX_ORDINALS; d++)
		pool_charged[d].bytes = 0;
}

static void graph_table_full(void)
{
	if (!__atomic_exchange_n(&graph_full_warned, 1, __ATOMIC_RELAXED))
		gs_log("graph table full: graph memory nodes and instantiations are refused");
}

static int graph_attr(CUdevice dev, CUgraphMem_attribute a, uint64_t *v)
{
	gs_pfn_cuDeviceGetGraphMemAttribute get = GS_REAL(cuDeviceGetGraphMemAttribute);
	cuuint64_t x = 0;
	if (get == NULL || get(dev, a, &x) != CUDA_SUCCESS)
		return -1;
	*v = x;
	return 0;
}

/* Charge exactly what dev's graph pool holds (graph_mu held). */
static void sync_pool(CUdevice dev)
{
	uint64_t held;
	if ((unsigned)dev >= GS_MAX_ORDINALS || graph_attr(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &held) < 0)
		return;
	uint64_t have = pool_charged[dev].bytes;
	if (held == have)
		return;
	int g = have ? pool_charged[dev].g : gs_dev_to_gpu(dev);
	if (g < 0)
		return; /* a GPU outside the session: nothing of it is charged */
	if (held > have)
		gs_charge_force(g, held - have);
	else
		gs_unreserve(g, have - held);
	pool_charged[dev].g = g;
	pool_charged[dev].bytes = held;
}

/* The device of the calling thread's current context; -1 when none. */
static CUdevice current_device(void)
{
	gs_pfn_cuCtxGetDevice getdev = GS_REAL(cuCtxGetDevice);
	CUdevice d;
	return getdev != NULL && getdev(&d) == CUDA_SUCCESS ? d : -1;
}

static void sync_all(void)
{
	gs_pfn_cuDeviceGetCount count = GS_REAL(cuDeviceGetCount);
	int n = 0;
	if (count == NULL || count(&n) != CUDA_SUCCESS)
		return;
	for (int d = 0; d < n && d < GS_MAX_ORDINALS; d++)
		sync_pool(d);
}

CUresult cuGraphAddMemAllocNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
				size_t numDependencies, CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams)
{
	gs_pfn_cuGraphAddMemAllocNode real = GS_REAL(cuGraphAddMemAllocNode);
	if (GS_UNLIKELY(real == NULL))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (gs_state() != GS_ST_ACTIVE || nodeParams == NULL || hGraph == NULL)
		return real(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
	uint64_t key = (uint64_t)(uintptr_t)hGraph;
	pthread_mutex_lock(&graph_mu);
	struct gs_xent *e = gs_xtab_find(GS_XTAB_GRAPH, key);
	if (e == NULL)
		e = gs_xtab_insert(GS_XTAB_GRAPH, key, 0, 0);
	CUresult r;
	if (e == NULL) {
		graph_table_full();
		r = CUDA_ERROR_OUT_OF_MEMORY;
	} else {
		r = real(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
		if (r == CUDA_SUCCESS) {
			uint64_t v = __atomic_load_n(&e->a, __ATOMIC_RELAXED);
			int dev = nodeParams->poolProps.location.id;
			if (gs_val_bytes(v) != 0 && gs_val_gpu(v) != dev)
				__atomic_store_n(&e->b, GS_GRAPH_MIXED, __ATOMIC_RELAXED);
			/* the driver maps graph memory at its 2 MiB granularity */
			uint64_t n = (nodeParams->bytesize + GS_GRAPH_GRANULE - 1) / GS_GRAPH_GRANULE * GS_GRAPH_GRANULE;
			__atomic_store_n(&e->a, gs_val_pack(dev, gs_val_bytes(v) + n), __ATOMIC_RELAXED);
		}
	}
	pthread_mutex_unlock(&graph_mu);
	return r;
}

/* Forget key in table kind (graph_mu held). */
static void forget(int kind, uint64_t key)
{
	struct gs_xent *e = gs_xtab_find(kind, key);
	if (e != NULL)
		gs_xtab_take(e, key);
}

CUresult cuGraphDestroy(CUgraph hGraph)
{
	gs_pfn_cuGraphDestroy real = GS_REAL(cuGraphDestroy);
	if (GS_UNLIKELY(real == NULL))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (gs_state() != GS_ST_ACTIVE)
		return real(hGraph);
	pthread_mutex_lock(&graph_mu);
	CUresult r = real(hGraph);
	if (r == CUDA_SUCCESS)
		forget(GS_XTAB_GRAPH, (uint64_t)(uintptr_t)hGraph);
	pthread_mutex_unlock(&graph_mu);
	return r;
}

/* After an instantiation: the executable graph inherits its graph's
 * allocation bytes (graph_mu held). -1 when it cannot be recorded. */
static int exec_created(CUgraph graph, CUgraphExec exec)
{
	struct gs_xent *g = gs_xtab_find(GS_XTAB_GRAPH, (uint64_t)(uintptr_t)graph);
	if (g == NULL || gs_val_bytes(__atomic_load_n(&g->a, __ATOMIC_RELAXED)) == 0)
		return 0; /* no allocation nodes seen: charged after each launch */
	uint64_t key = (uint64_t)(uintptr_t)exec;
	forget(GS_XTAB_GEXEC, key); /* a handle the driver reused */
	return gs_xtab_insert(GS_XTAB_GEXEC, key, __atomic_load_n(&g->a, __ATOMIC_RELAXED),
			      __atomic_load_n(&g->b, __ATOMIC_RELAXED)) != NULL
		       ? 0
		       : -1;
}

#define GS_GRAPH_INSTANTIATE(sym, params, call_args)                               \
	CUresult sym params                                                        \
	{                                                                          \
		gs_pfn_##sym real = GS_REAL(sym);                                  \
		if (GS_UNLIKELY(real == NULL))                                     \
			return CUDA_ERROR_NOT_INITIALIZED;                         \
		if (gs_state() != GS_ST_ACTIVE || phGraphExec == NULL)             \
			return real call_args;                                     \
		pthread_mutex_lock(&graph_mu);                                     \
		CUresult r = real call_args;                                       \
		if (r == CUDA_SUCCESS && exec_created(hGraph, *phGraphExec) < 0) { \
			gs_pfn_cuGraphExecDestroy d = GS_REAL(cuGraphExecDestroy); \
			if (d != NULL)                                             \
				d(*phGraphExec);                                   \
			*phGraphExec = NULL;                                       \
			graph_table_full();                                        \
			r = CUDA_ERROR_OUT_OF_MEMORY;                              \
		}                                                                  \
		pthread_mutex_unlock(&graph_mu);                                   \
		return r;                                                          \
	}

GS_GRAPH_INSTANTIATE(cuGraphInstantiate,
		     (CUgraphExec * phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode, char *logBuffer,
		      size_t bufferSize),
		     (phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize))
GS_GRAPH_INSTANTIATE(cuGraphInstantiate_v2,
		     (CUgraphExec * phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode, char *logBuffer,
		      size_t bufferSize),
		     (phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize))
GS_GRAPH_INSTANTIATE(cuGraphInstantiateWithFlags, (CUgraphExec * phGraphExec, CUgraph hGraph, unsigned long long flags),
		     (phGraphExec, hGraph, flags))
GS_GRAPH_INSTANTIATE(cuGraphInstantiateWithParams,
		     (CUgraphExec * phGraphExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams),
		     (phGraphExec, hGraph, instantiateParams))
GS_GRAPH_INSTANTIATE(cuGraphInstantiateWithParams_ptsz,
		     (CUgraphExec * phGraphExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams),
		     (phGraphExec, hGraph, instantiateParams))

/* Before a launch (graph_mu held): reserve the growth of dev's pool the
 * launch may cause. -1 when it does not fit. */
static int reserve_growth(CUdevice dev, uint64_t bytes)
{
	uint64_t used, held;
	if ((unsigned)dev >= GS_MAX_ORDINALS)
		return -1;
	if (graph_attr(dev, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &used) < 0 ||
	    graph_attr(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &held) < 0)
		used = held = 0;
	sync_pool(dev);
	uint64_t free_in_pool = held > used ? held - used : 0;
	uint64_t grow = bytes > free_in_pool ? bytes - free_in_pool : 0;
	if (grow == 0)
		return 0;
	int g = gs_dev_to_gpu(dev);
	if (g < 0 || gs_reserve(g, grow) < 0)
		return -1;
	/* counted as held: the sync after the launch settles on the driver's figure */
	pool_charged[dev].g = g;
	pool_charged[dev].bytes += grow;
	return 0;
}

#define GS_GRAPH_LAUNCH(sym)                                                          \
	CUresult sym(CUgraphExec hGraphExec, CUstream hStream)                        \
	{                                                                             \
		gs_pfn_##sym real = GS_REAL(sym);                                     \
		if (GS_UNLIKELY(real == NULL))                                        \
			return CUDA_ERROR_NOT_INITIALIZED;                            \
		gs_gate(); /* the launch gate: a graph's kernels are GPU time */      \
		if (gs_state() != GS_ST_ACTIVE)                                       \
			return real(hGraphExec, hStream);                             \
		pthread_mutex_lock(&graph_mu);                                        \
		struct gs_xent *e = gs_xtab_find(GS_XTAB_GEXEC, (uint64_t)(uintptr_t)hGraphExec); \
		uint64_t v = e != NULL ? __atomic_load_n(&e->a, __ATOMIC_RELAXED) : 0; \
		int mixed = e != NULL && __atomic_load_n(&e->b, __ATOMIC_RELAXED) != 0; \
		CUresult r;                                                           \
		if (!mixed && gs_val_bytes(v) != 0 &&                                 \
		    reserve_growth(gs_val_gpu(v), gs_val_bytes(v)) < 0) {             \
			r = CUDA_ERROR_OUT_OF_MEMORY;                                 \
		} else {                                                              \
			r = real(hGraphExec, hStream);                                \
		}                                                                     \
		if (mixed)                                                            \
			sync_all();                                                   \
		else if (e == NULL) /* allocations not seen (stream capture) */       \
			sync_pool(current_device());                                  \
		else                                                                  \
			sync_pool(gs_val_gpu(v));                                     \
		pthread_mutex_unlock(&graph_mu);                                      \
		return r;                                                             \
	}

GS_GRAPH_LAUNCH(cuGraphLaunch)
GS_GRAPH_LAUNCH(cuGraphLaunch_ptsz)

CUresult cuGraphExecDestroy(CUgraphExec hGraphExec)
{
	gs_pfn_cuGraphExecDestroy real = GS_REAL(cuGraphExecDestroy);
	if (GS_UNLIKELY(real == NULL))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (gs_state() != GS_ST_ACTIVE)
		return real(hGraphExec);
	pthread_mutex_lock(&graph_mu);
	CUresult r = real(hGraphExec);
	if (r == CUDA_SUCCESS) {
		forget(GS_XTAB_GEXEC, (uint64_t)(uintptr_t)hGraphExec);
		sync_all();
	}
	pthread_mutex_unlock(&graph_mu);
	return r;
}

CUresult cuDeviceGraphMemTrim(CUdevice device)
{
	gs_pfn_cuDeviceGraphMemTrim real = GS_REAL(cuDeviceGraphMemTrim);
	if (GS_UNLIKELY(real == NULL))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (gs_state() != GS_ST_ACTIVE)
		return real(device);
	pthread_mutex_lock(&graph_mu);
	CUresult r = real(device);
	if (r == CUDA_SUCCESS)
		sync_pool(device);
	pthread_mutex_unlock(&graph_mu);
	return r;
}
