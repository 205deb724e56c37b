// Graph-mode sendrecv with NCCL alone (no torch, no Python), one rank per process, as torch's
// ranks run -- the baseline that tells a gap between dtlab and nccl-tests apart into what torch
// adds and what two processes cost NCCL against nccl-tests' one process driving every GPU
// (NCCL's log says "directMode 1" there, "directMode 0" for ranks in separate processes).
//
// Timing as dtlab.bench.graph.time_graphed (and nccl-tests -G): a few eager calls first, then
// ITERS calls (ncclGroupStart; ncclSend to the next rank; ncclRecv from the previous;
// ncclGroupEnd) captured in one CUDA graph in thread-local mode, one untimed replay, an eager
// 1-element all_reduce to line the GPUs up, CUDA events around LAUNCHES replays; microseconds
// per call = elapsed / (ITERS * LAUNCHES), the MAX over ranks. Out of place (the received buffer
// is checked) and in place (one buffer sends and receives, as the recorded comparisons; what it
// holds afterwards is not defined, as nccl-tests says N/A). SR_DOT=FILE writes the first size's
// captured graph (cudaGraphDebugDotPrint) to FILE.<rank>.dot.
//
//   nvcc -O2 -o /tmp/sr scripts/nccl_sendrecv_procs.cu -I$NCCL_HOME/include -L$NCCL_HOME/lib -lnccl
//   /tmp/sr NGPUS MIN_BYTES MAX_BYTES [LAUNCHES]    # prints: bytes  out-of-place_us  in-place_us
//
// Used by scripts/gpu_graph_like.sh (PROCS=1); recorded in data/h200x2-sendrecv-procs/.
#include <cuda_runtime.h>
#include <nccl.h>
#include <cstdio>
#include <cstdlib>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); _exit(3); } } while (0)
#define NK(x) do { ncclResult_t r = (x); if (r != ncclSuccess) { \
  fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, ncclGetErrorString(r)); _exit(4); } } while (0)

static const int ITERS = 20, WARMUP = 5;

static void sendrecv(float *in, float *out, size_t n, int rank, int nranks, ncclComm_t comm,
                     cudaStream_t s) {
  NK(ncclGroupStart());
  NK(ncclSend(in, n, ncclFloat, (rank + 1) % nranks, comm, s));
  NK(ncclRecv(out, n, ncclFloat, (rank - 1 + nranks) % nranks, comm, s));
  NK(ncclGroupEnd());
}

static double over_ranks(double v, ncclRedOp_t op, ncclComm_t comm, cudaStream_t s, double *dev) {
  CK(cudaMemcpy(dev, &v, sizeof v, cudaMemcpyHostToDevice));
  NK(ncclAllReduce(dev, dev, 1, ncclDouble, op, comm, s));
  CK(cudaStreamSynchronize(s));
  CK(cudaMemcpy(&v, dev, sizeof v, cudaMemcpyDeviceToHost));
  return v;
}

// Microseconds per call of sendrecv(in -> out) replayed from a graph, the MAX over ranks; -1 if
// out of place and any rank received the wrong data.
static double timed(float *in, float *out, size_t n, int rank, int nranks, ncclComm_t comm,
                    cudaStream_t s, int launches, float *align, double *dev) {
  std::vector<float> fill(n, float(rank + 1));
  CK(cudaMemcpy(in, fill.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  for (int i = 0; i < WARMUP; i++) sendrecv(in, out, n, rank, nranks, comm, s);
  CK(cudaStreamSynchronize(s));
  cudaGraph_t graph; cudaGraphExec_t exec;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < ITERS; i++) sendrecv(in, out, n, rank, nranks, comm, s);
  CK(cudaStreamEndCapture(s, &graph));
  static bool dumped = false;
  if (getenv("SR_DOT") && !dumped) {
    char path[4096];
    snprintf(path, sizeof path, "%s.%d.dot", getenv("SR_DOT"), rank);
    CK(cudaGraphDebugDotPrint(graph, path, cudaGraphDebugDotFlagsVerbose));
    dumped = true;
  }
  CK(cudaGraphInstantiate(&exec, graph, 0));
  CK(cudaGraphLaunch(exec, s));  // first launch: upload, untimed
  CK(cudaStreamSynchronize(s));
  cudaEvent_t t0, t1;
  CK(cudaEventCreate(&t0)); CK(cudaEventCreate(&t1));
  NK(ncclAllReduce(align, align, 1, ncclFloat, ncclSum, comm, s));
  CK(cudaEventRecord(t0, s));
  for (int i = 0; i < launches; i++) CK(cudaGraphLaunch(exec, s));
  CK(cudaEventRecord(t1, s));
  CK(cudaEventSynchronize(t1));
  float ms; CK(cudaEventElapsedTime(&ms, t0, t1));
  CK(cudaGraphExecDestroy(exec)); CK(cudaGraphDestroy(graph));
  CK(cudaEventDestroy(t0)); CK(cudaEventDestroy(t1));
  // in place, the buffer that sent now holds the previous rank's data: (rank - 1) + 1
  float want = float((rank - 1 + nranks) % nranks + 1), got;
  CK(cudaMemcpy(&got, out + n - 1, sizeof got, cudaMemcpyDeviceToHost));
  double ok = over_ranks(got == want || in == out ? 1.0 : 0.0, ncclMin, comm, s, dev);
  double us = over_ranks(ms * 1e3 / (ITERS * double(launches)), ncclMax, comm, s, dev);
  return ok == 1.0 ? us : -1.0;
}

int main(int argc, char **argv) {
  if (argc < 4) { fprintf(stderr, "usage: %s NGPUS MIN_BYTES MAX_BYTES [LAUNCHES]\n", argv[0]); return 2; }
  int nranks = atoi(argv[1]), launches = argc > 4 ? atoi(argv[4]) : 100;
  size_t lo = strtoull(argv[2], 0, 10), hi = strtoull(argv[3], 0, 10);
  // This process touches neither CUDA nor NCCL (a child cannot use CUDA its parent initialised):
  // rank 0 makes the unique id and hands it to the others through a pipe each.
  std::vector<int> wr(nranks, -1), rd(nranks, -1);
  for (int r = 1; r < nranks; r++) { int p[2]; if (pipe(p)) { perror("pipe"); return 1; } rd[r] = p[0]; wr[r] = p[1]; }
  std::vector<pid_t> kids;
  for (int rank = 0; rank < nranks; rank++) {
    pid_t pid = fork();
    if (pid < 0) { perror("fork"); return 1; }
    if (pid > 0) { kids.push_back(pid); continue; }
    ncclUniqueId id;
    if (rank == 0) {
      NK(ncclGetUniqueId(&id));
      for (int r = 1; r < nranks; r++)
        if (write(wr[r], &id, sizeof id) != sizeof id) { perror("write"); _exit(5); }
    } else if (read(rd[rank], &id, sizeof id) != sizeof id) { perror("read"); _exit(5); }
    CK(cudaSetDevice(rank));
    ncclComm_t comm; cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    NK(ncclCommInitRank(&comm, nranks, id, rank));
    size_t n_max = hi / sizeof(float) > 0 ? hi / sizeof(float) : 1;
    float *a, *b, *align; double *dev;
    CK(cudaMalloc(&a, n_max * sizeof(float))); CK(cudaMalloc(&b, n_max * sizeof(float)));
    CK(cudaMalloc(&align, sizeof(float))); CK(cudaMalloc(&dev, sizeof(double)));
    if (rank == 0) printf("# NCCL alone, %d processes, graph of %d calls x %d launches\n"
                          "# bytes  out_of_place_us  in_place_us\n", nranks, ITERS, launches);
    for (size_t bytes = lo; bytes <= hi; bytes *= 2) {
      size_t n = bytes / sizeof(float) > 0 ? bytes / sizeof(float) : 1;
      double oop = timed(a, b, n, rank, nranks, comm, s, launches, align, dev);
      double ip = timed(a, a, n, rank, nranks, comm, s, launches, align, dev);
      if (rank == 0) { printf("%zu %.3f %.3f\n", bytes, oop, ip); fflush(stdout); }
    }
    NK(ncclCommDestroy(comm));
    _exit(0);
  }
  int bad = 0;
  for (pid_t k : kids) { int st; waitpid(k, &st, 0); bad |= !WIFEXITED(st) || WEXITSTATUS(st); }
  return bad;
}
