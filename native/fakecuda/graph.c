/*
 * Graphs, as far as their memory goes: graphs made of memory allocation and
 * free nodes (other node kinds are not modelled), their instantiation and
 * launch, and each device's graph memory pool.
 *
 * The driver's documented semantics, modelled:
 *  - cuGraphAddMemAllocNode fixes the allocation's address (a reserved,
 *    inaccessible range here) but allocates nothing;
 *  - the memory exists from the launch of an executable graph: the
 *    device's graph pool grows (charged to the device and to this
 *    process, like any allocation) when its free memory does not cover the
 *    graph's allocations; a launch that does not fit fails with
 *    CUDA_ERROR_OUT_OF_MEMORY;
 *  - a free node in the same graph returns the allocation to the pool (it
 *    stays reserved, and charged); an allocation the graph does not free
 *    stays live until the executable graph is destroyed or, with
 *    CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH, relaunched (a
 *    relaunch without the flag while it is live fails);
 *  - cuDeviceGraphMemTrim gives the pool's unused memory back;
 *  - a graph with memory nodes has at most one executable graph at a time.
 * Not modelled: freeing a graph allocation outside the graph
 * (cuMemFreeAsync), copies to graph memory, graph allocations on several
 * devices in one graph beyond the bookkeeping, cuGraphUpload's reservation.
 */
#include "drv.h"
#include "timeline.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define FC_MAGIC_GRAPH 0x47525031u
#define FC_MAGIC_GNODE 0x474e4431u
#define FC_MAGIC_GEXEC 0x47455831u

enum { GN_ALLOC = 1, GN_FREE };

struct CUgraphNode_st {
	uint32_t magic;
	int type;
	size_t bytes;     /* alloc */
	uintptr_t dptr;   /* alloc: its address; free: what it frees */
	unsigned phys;    /* alloc */
	struct CUgraphNode_st *next;
};

struct CUgraph_st {
	uint32_t magic;
	unsigned nexec;
	struct CUgraphNode_st *nodes;
};

struct CUgraphExec_st {
	uint32_t magic;
	CUgraph graph;
	unsigned long long flags;
	bool live; /* allocations not freed by the last launch */
};

static pthread_mutex_t graph_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t pool_used[FC_MAX_DEVICES], pool_reserved[FC_MAX_DEVICES];
static fc_limtok pool_lim[FC_MAX_DEVICES]; /* the limits the pool's last growth was charged under */
static uint64_t pool_used_high[FC_MAX_DEVICES], pool_reserved_high[FC_MAX_DEVICES];

static bool graph_valid(CUgraph g) { return g != NULL && g->magic == FC_MAGIC_GRAPH; }
static bool exec_valid(CUgraphExec e) { return e != NULL && e->magic == FC_MAGIC_GEXEC; }

FC_API CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
	FC_CHECK_INIT();
	if (phGraph == NULL || flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	struct CUgraph_st *g = calloc(1, sizeof(*g));
	if (g == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	g->magic = FC_MAGIC_GRAPH;
	*phGraph = g;
	return CUDA_SUCCESS;
}

FC_API CUresult cuGraphDestroy(CUgraph hGraph)
{
	FC_CHECK_INIT();
	pthread_mutex_lock(&graph_lock);
	if (!graph_valid(hGraph)) {
		pthread_mutex_unlock(&graph_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	hGraph->magic = FC_MAGIC_DEAD;
	struct CUgraphNode_st *n = hGraph->nodes;
	pthread_mutex_unlock(&graph_lock);
	while (n != NULL) {
		struct CUgraphNode_st *next = n->next;
		if (n->type == GN_ALLOC)
			munmap((void *)n->dptr, n->bytes);
		n->magic = FC_MAGIC_DEAD;
		free(n);
		n = next;
	}
	free(hGraph);
	return CUDA_SUCCESS;
}

static CUresult add_node(CUgraph g, const CUgraphNode *deps, size_t ndeps, struct CUgraphNode_st *n,
			 CUgraphNode *out)
{
	if (ndeps > 0 && deps == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < ndeps; i++)
		if (deps[i] == NULL || deps[i]->magic != FC_MAGIC_GNODE)
			return CUDA_ERROR_INVALID_VALUE;
	n->magic = FC_MAGIC_GNODE;
	n->next = g->nodes; /* dependencies only order the work; all of it is synchronous here */
	g->nodes = n;
	*out = n;
	return CUDA_SUCCESS;
}

FC_API CUresult cuGraphAddMemAllocNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
				       size_t numDependencies, CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams)
{
	FC_CHECK_INIT();
	if (phGraphNode == NULL || nodeParams == NULL || nodeParams->bytesize == 0 ||
	    nodeParams->poolProps.allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    nodeParams->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return CUDA_ERROR_INVALID_VALUE;
	if (!fc_valid_dev(nodeParams->poolProps.location.id))
		return CUDA_ERROR_INVALID_DEVICE;
	struct CUgraphNode_st *n = calloc(1, sizeof(*n));
	if (n == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	size_t bytes = (nodeParams->bytesize + FC_GRANULARITY - 1) / FC_GRANULARITY * FC_GRANULARITY;
	void *va = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (va == MAP_FAILED) {
		free(n);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	n->type = GN_ALLOC;
	n->bytes = bytes;
	n->dptr = (uintptr_t)va;
	n->phys = fc_visible[nodeParams->poolProps.location.id];
	pthread_mutex_lock(&graph_lock);
	CUresult r = graph_valid(hGraph) ? add_node(hGraph, dependencies, numDependencies, n, phGraphNode)
					 : CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_unlock(&graph_lock);
	if (r != CUDA_SUCCESS) {
		munmap(va, bytes);
		free(n);
		return r;
	}
	nodeParams->dptr = (CUdeviceptr)n->dptr;
	return CUDA_SUCCESS;
}

FC_API CUresult cuGraphAddMemFreeNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
				      size_t numDependencies, CUdeviceptr dptr)
{
	FC_CHECK_INIT();
	if (phGraphNode == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	struct CUgraphNode_st *n = calloc(1, sizeof(*n));
	if (n == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	n->type = GN_FREE;
	n->dptr = (uintptr_t)dptr;
	pthread_mutex_lock(&graph_lock);
	CUresult r = CUDA_ERROR_INVALID_VALUE;
	if (graph_valid(hGraph)) {
		/* only an allocation of this graph, freed once */
		bool found = false, freed = false;
		for (struct CUgraphNode_st *m = hGraph->nodes; m != NULL; m = m->next) {
			found |= m->type == GN_ALLOC && m->dptr == n->dptr;
			freed |= m->type == GN_FREE && m->dptr == n->dptr;
		}
		if (found && !freed)
			r = add_node(hGraph, dependencies, numDependencies, n, phGraphNode);
	}
	pthread_mutex_unlock(&graph_lock);
	if (r != CUDA_SUCCESS)
		free(n);
	return r;
}

static bool has_memory_nodes(CUgraph g)
{
	for (struct CUgraphNode_st *n = g->nodes; n != NULL; n = n->next)
		if (n->type == GN_ALLOC || n->type == GN_FREE)
			return true;
	return false;
}

static CUresult instantiate(CUgraphExec *out, CUgraph g, unsigned long long flags)
{
	FC_CHECK_INIT();
	if (out == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	struct CUgraphExec_st *e = calloc(1, sizeof(*e));
	if (e == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&graph_lock);
	CUresult r = CUDA_SUCCESS;
	if (!graph_valid(g))
		r = CUDA_ERROR_INVALID_VALUE;
	else if (g->nexec > 0 && has_memory_nodes(g))
		r = CUDA_ERROR_INVALID_VALUE; /* one executable graph at a time */
	if (r == CUDA_SUCCESS) {
		g->nexec++;
		e->magic = FC_MAGIC_GEXEC;
		e->graph = g;
		e->flags = flags;
		*out = e;
	}
	pthread_mutex_unlock(&graph_lock);
	if (r != CUDA_SUCCESS)
		free(e);
	return r;
}

FC_API CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags)
{
	if (flags & ~(unsigned long long)(CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH))
		return CUDA_ERROR_INVALID_VALUE;
	return instantiate(phGraphExec, hGraph, flags);
}

FC_API CUresult cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
				   char *logBuffer, size_t bufferSize)
{
	if (logBuffer != NULL && bufferSize > 0)
		logBuffer[0] = 0;
	if (phErrorNode != NULL)
		*phErrorNode = NULL;
	return instantiate(phGraphExec, hGraph, 0);
}

FC_API CUresult cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
				      char *logBuffer, size_t bufferSize)
{
	return cuGraphInstantiate(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

FC_API CUresult cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
					     CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
	if (params == NULL || (params->flags & ~(cuuint64_t)(CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH |
							    CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD)))
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = instantiate(phGraphExec, hGraph, params->flags);
	params->hErrNode_out = NULL;
	params->result_out = r == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
	return r;
}
FC_PT_WRAP(CUresult, cuGraphInstantiateWithParams, _ptsz,
	   (CUgraphExec * phGraphExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS *params),
	   (phGraphExec, hGraph, params))

/* The exec's live allocations go back to the pool (graph_lock held). */
static void free_live(CUgraphExec e)
{
	if (!e->live)
		return;
	for (struct CUgraphNode_st *n = e->graph->nodes; n != NULL; n = n->next) {
		if (n->type != GN_ALLOC)
			continue;
		bool freed_in_graph = false;
		for (struct CUgraphNode_st *m = e->graph->nodes; m != NULL; m = m->next)
			freed_in_graph |= m->type == GN_FREE && m->dptr == n->dptr;
		if (!freed_in_graph)
			pool_used[n->phys] -= n->bytes;
	}
	e->live = false;
}

FC_API CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
	FC_CHECK_INIT();
	CUresult err = CUDA_SUCCESS;
	if (fc_stream_ctx(hStream, &err) == NULL)
		return err;
	pthread_mutex_lock(&graph_lock);
	if (!exec_valid(hGraphExec) || !graph_valid(hGraphExec->graph)) {
		pthread_mutex_unlock(&graph_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	CUgraphExec e = hGraphExec;
	if (e->live) {
		if (!(e->flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH)) {
			pthread_mutex_unlock(&graph_lock);
			return CUDA_ERROR_INVALID_VALUE; /* its allocations are still live */
		}
		free_live(e);
	}
	/* the allocations come into existence: the pool grows where needed */
	uint64_t want[FC_MAX_DEVICES] = {0};
	for (struct CUgraphNode_st *n = e->graph->nodes; n != NULL; n = n->next)
		if (n->type == GN_ALLOC)
			want[n->phys] += n->bytes;
	unsigned d;
	uint64_t grown[FC_MAX_DEVICES] = {0};
	fc_limtok lims[FC_MAX_DEVICES] = {0};
	for (d = 0; d < FC_MAX_DEVICES; d++) {
		if (want[d] == 0)
			continue;
		uint64_t free_in_pool = pool_reserved[d] - pool_used[d];
		uint64_t grow = want[d] > free_in_pool ? want[d] - free_in_pool : 0;
		if (grow > 0 && !fc_charge_lim(d, grow, &lims[d]))
			break;
		grown[d] = grow;
	}
	if (d < FC_MAX_DEVICES) {
		for (unsigned k = 0; k < d; k++)
			if (grown[k])
				fc_uncharge_lim(k, grown[k], lims[k]);
		pthread_mutex_unlock(&graph_lock);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	bool live = false;
	for (d = 0; d < FC_MAX_DEVICES; d++) {
		if (grown[d])
			pool_lim[d] = lims[d];
		pool_reserved[d] += grown[d];
		pool_used[d] += want[d];
		if (pool_reserved[d] > pool_reserved_high[d])
			pool_reserved_high[d] = pool_reserved[d];
		if (pool_used[d] > pool_used_high[d])
			pool_used_high[d] = pool_used[d];
	}
	/* the graph's free nodes return their allocations to the pool */
	for (struct CUgraphNode_st *n = e->graph->nodes; n != NULL; n = n->next) {
		if (n->type != GN_ALLOC)
			continue;
		bool freed = false;
		for (struct CUgraphNode_st *m = e->graph->nodes; m != NULL; m = m->next)
			freed |= m->type == GN_FREE && m->dptr == n->dptr;
		if (freed)
			pool_used[n->phys] -= n->bytes;
		else
			live = true;
	}
	e->live = live;
	pthread_mutex_unlock(&graph_lock);
	return fc_stream_submit(hStream, fc_tl_graph_ns()); /* the graph's work, on the modelled GPU */
}
FC_PT_WRAP(CUresult, cuGraphLaunch, _ptsz, (CUgraphExec hGraphExec, CUstream hStream), (hGraphExec, hStream))

FC_API CUresult cuGraphExecDestroy(CUgraphExec hGraphExec)
{
	FC_CHECK_INIT();
	pthread_mutex_lock(&graph_lock);
	if (!exec_valid(hGraphExec)) {
		pthread_mutex_unlock(&graph_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (graph_valid(hGraphExec->graph)) {
		free_live(hGraphExec);
		hGraphExec->graph->nexec--;
	}
	hGraphExec->magic = FC_MAGIC_DEAD;
	pthread_mutex_unlock(&graph_lock);
	free(hGraphExec);
	return CUDA_SUCCESS;
}

FC_API CUresult cuDeviceGraphMemTrim(CUdevice device)
{
	FC_CHECK_INIT();
	if (!fc_valid_dev(device))
		return CUDA_ERROR_INVALID_DEVICE;
	unsigned d = fc_visible[device];
	pthread_mutex_lock(&graph_lock);
	uint64_t unused = pool_reserved[d] - pool_used[d];
	pool_reserved[d] = pool_used[d];
	pthread_mutex_unlock(&graph_lock);
	if (unused)
		fc_uncharge_lim(d, unused, pool_lim[d]);
	return CUDA_SUCCESS;
}

FC_API CUresult cuDeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void *value)
{
	FC_CHECK_INIT();
	if (!fc_valid_dev(device))
		return CUDA_ERROR_INVALID_DEVICE;
	if (value == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	unsigned d = fc_visible[device];
	uint64_t v;
	pthread_mutex_lock(&graph_lock);
	switch (attr) {
	case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT: v = pool_used[d]; break;
	case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH: v = pool_used_high[d]; break;
	case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT: v = pool_reserved[d]; break;
	case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH: v = pool_reserved_high[d]; break;
	default:
		pthread_mutex_unlock(&graph_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	pthread_mutex_unlock(&graph_lock);
	*(cuuint64_t *)value = v;
	return CUDA_SUCCESS;
}
