/* Kernels of the training sample's model (mlp_model.h), in plain CUDA C.
 *
 * Activations are row-major [sample][feature], weights row-major
 * [fan_in][fan_out], so a layer is out = in x W + b and its backward pass is
 * dW = in^T x delta, db = column sums of delta, delta_in = (delta x W^T) masked
 * by the ReLU. One tiled matrix-product kernel does all three products, told
 * which operands are stored transposed. */
#include "mlp_model.h"

#include <math.h>
#include <stdint.h>

/* Seeds of the parameter initialization are the caller's; these fix the data. */
#define DATA_SEED 0x5eedda7aull
#define TEACHER_SEED 0x7eac4e25ull

enum { THREADS = 256, MAX_BLOCKS = 1024 };

static unsigned blocks_for(size_t n) {
  size_t b = (n + THREADS - 1) / THREADS;
  if (b > MAX_BLOCKS) b = MAX_BLOCKS;
  return b ? (unsigned)b : 1u;
}

int mlp_fan_in(int layer) { return layer == 0 ? MLP_INPUTS : MLP_HIDDEN; }
int mlp_fan_out(int layer) { return layer == MLP_LAYERS - 1 ? MLP_CLASSES : MLP_HIDDEN; }

void mlp_layout_init(mlp_layout_t *layout) {
  size_t at = 0;
  for (int l = MLP_LAYERS - 1; l >= 0; l--) {
    layout->weights[l] = at;
    at += (size_t)mlp_fan_in(l) * (size_t)mlp_fan_out(l);
    layout->bias[l] = at;
    at += (size_t)mlp_fan_out(l);
  }
  layout->total = at;
}

/* ---- hashing: the same numbers on every GPU and in every run */

static __device__ uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

/* A number in [-1, 1) that depends only on (seed, a, b). */
static __device__ float hash_uniform(uint64_t seed, uint64_t a, uint64_t b) {
  uint64_t h = mix64(seed ^ mix64(a * 0x9E3779B97F4A7C15ull + b));
  return (float)(h >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

/* ---- initialization and bookkeeping */

static __global__ void init_uniform_kernel(float *out, size_t n, float scale, uint64_t seed) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = scale * hash_uniform(seed, i, 0);
}

static __global__ void fill_kernel(float *out, size_t n, float value) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) out[i] = value;
}

static __global__ void set_step_kernel(unsigned long long *step, unsigned long long value) { *step = value; }

static __global__ void finish_step_kernel(float *history, int history_len, const float *loss,
                                          unsigned long long *step) {
  if (*step < (unsigned long long)history_len) history[*step] = *loss;
  *step += 1;
}

/* ---- data: one block per sample */

/* Inputs uniform in [-1, 1); the label is the class whose teacher row scores
 * the inputs highest. */
static __global__ void make_batch_kernel(float *inputs, int *labels, int first_sample, int global_batch,
                                         const unsigned long long *step) {
  __shared__ float x[MLP_INPUTS];
  __shared__ float score[MLP_CLASSES];
  int i = blockIdx.x;
  uint64_t sample = *step * (uint64_t)global_batch + (uint64_t)(first_sample + i);
  for (int j = threadIdx.x; j < MLP_INPUTS; j += blockDim.x) {
    x[j] = hash_uniform(DATA_SEED, sample, (uint64_t)j);
    inputs[(size_t)i * MLP_INPUTS + j] = x[j];
  }
  __syncthreads();
  for (int c = threadIdx.x; c < MLP_CLASSES; c += blockDim.x) {
    float s = 0.0f;
    for (int j = 0; j < MLP_INPUTS; j++) s += x[j] * hash_uniform(TEACHER_SEED, (uint64_t)j, (uint64_t)c);
    score[c] = s;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int best = 0;
    for (int c = 1; c < MLP_CLASSES; c++)
      if (score[c] > score[best]) best = c;
    labels[i] = best;
  }
}

/* ---- the matrix product */

/* C (m x n) = A (m x k) x B (k x n), then + bias[col], ReLU, or zeroed where
 * mask <= 0 (the ReLU's derivative, from the layer's output), as asked.
 * A is stored [m][k], or [k][m] when trans_a; B is stored [k][n], or [n][k]
 * when trans_b. A block computes a 64 x 64 tile of C from 16-deep slices of A
 * and B in shared memory; each of its 256 threads keeps 4 x 4 sums in
 * registers and adds its products in ascending k, so results do not depend
 * on the launch. */
enum { TILE_M = 64, TILE_N = 64, TILE_K = 16, TILE_THREADS = 256, PER_THREAD = 4 };

static __global__ void __launch_bounds__(TILE_THREADS)
    matmul_kernel(const float *a, int trans_a, const float *b, int trans_b, float *c, int m, int n, int k,
                  const float *bias, int relu, const float *mask) {
  /* +1: threads storing along k in one warp hit different banks */
  __shared__ float a_tile[TILE_K][TILE_M + 1];
  __shared__ float b_tile[TILE_K][TILE_N + 1];
  int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  int row0 = blockIdx.y * TILE_M, col0 = blockIdx.x * TILE_N;
  float sum[PER_THREAD][PER_THREAD] = {{0.0f}};

  for (int k0 = 0; k0 < k; k0 += TILE_K) {
    /* loads walk memory in order for either storage, so a warp's reads are
     * consecutive addresses */
    for (int e = tid; e < TILE_M * TILE_K; e += TILE_THREADS) {
      int r = trans_a ? e % TILE_M : e / TILE_K, kk = trans_a ? e / TILE_M : e % TILE_K;
      int gr = row0 + r, gk = k0 + kk;
      float v = 0.0f;
      if (gr < m && gk < k) v = trans_a ? a[(size_t)gk * m + gr] : a[(size_t)gr * k + gk];
      a_tile[kk][r] = v;
    }
    for (int e = tid; e < TILE_N * TILE_K; e += TILE_THREADS) {
      int col = trans_b ? e / TILE_K : e % TILE_N, kk = trans_b ? e % TILE_K : e / TILE_N;
      int gc = col0 + col, gk = k0 + kk;
      float v = 0.0f;
      if (gc < n && gk < k) v = trans_b ? b[(size_t)gc * k + gk] : b[(size_t)gk * n + gc];
      b_tile[kk][col] = v;
    }
    __syncthreads();
    for (int kk = 0; kk < TILE_K; kk++) {
      float av[PER_THREAD], bv[PER_THREAD];
      for (int i = 0; i < PER_THREAD; i++) av[i] = a_tile[kk][ty + 16 * i];
      for (int j = 0; j < PER_THREAD; j++) bv[j] = b_tile[kk][tx + 16 * j];
      for (int i = 0; i < PER_THREAD; i++)
        for (int j = 0; j < PER_THREAD; j++) sum[i][j] += av[i] * bv[j];
    }
    __syncthreads();
  }

  for (int i = 0; i < PER_THREAD; i++) {
    int row = row0 + ty + 16 * i;
    if (row >= m) continue;
    for (int j = 0; j < PER_THREAD; j++) {
      int col = col0 + tx + 16 * j;
      if (col >= n) continue;
      size_t at = (size_t)row * n + col;
      float v = sum[i][j];
      if (bias) v += bias[col];
      if (relu) v = fmaxf(v, 0.0f);
      if (mask && mask[at] <= 0.0f) v = 0.0f;
      c[at] = v;
    }
  }
}

static cudaError_t matmul(const float *a, int trans_a, const float *b, int trans_b, float *c, int m, int n, int k,
                          const float *bias, int relu, const float *mask, cudaStream_t stream) {
  dim3 grid((unsigned)((n + TILE_N - 1) / TILE_N), (unsigned)((m + TILE_M - 1) / TILE_M));
  matmul_kernel<<<grid, TILE_THREADS, 0, stream>>>(a, trans_a, b, trans_b, c, m, n, k, bias, relu, mask);
  return cudaGetLastError();
}

/* out[col] = sum over rows of in[row][col], one thread per column. */
static __global__ void column_sums_kernel(const float *in, int rows, int cols, float *out) {
  int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= cols) return;
  float s = 0.0f;
  for (int r = 0; r < rows; r++) s += in[(size_t)r * cols + col];
  out[col] = s;
}

/* ---- loss: one block, so the mean is summed in one fixed order */

/* Softmax cross-entropy of each sample's logits against its label: *loss is
 * the mean over the batch, delta the gradient of that mean with respect to the
 * logits, (softmax - one_hot) / batch. */
static __global__ void __launch_bounds__(THREADS)
    softmax_loss_kernel(const float *logits, const int *labels, int batch, float *delta, float *loss) {
  __shared__ float partial[THREADS];
  float mine = 0.0f;
  for (int i = threadIdx.x; i < batch; i += blockDim.x) {
    const float *z = logits + (size_t)i * MLP_CLASSES;
    float top = z[0], total = 0.0f;
    for (int c = 1; c < MLP_CLASSES; c++) top = fmaxf(top, z[c]);
    for (int c = 0; c < MLP_CLASSES; c++) total += expf(z[c] - top);
    int label = labels[i];
    mine += logf(total) + top - z[label];
    for (int c = 0; c < MLP_CLASSES; c++) {
      float p = expf(z[c] - top) / total;
      delta[(size_t)i * MLP_CLASSES + c] = (p - (c == label ? 1.0f : 0.0f)) / (float)batch;
    }
  }
  partial[threadIdx.x] = mine;
  __syncthreads();
  for (int half = THREADS / 2; half > 0; half /= 2) {
    if ((int)threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) *loss = partial[0] / (float)batch;
}

static __global__ void sgd_kernel(float *params, const float *grads, size_t n, float learning_rate) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    params[i] -= learning_rate * grads[i];
}

/* ---- the public functions */

cudaError_t mlp_net_alloc(mlp_net_t *net) {
  cudaError_t err = cudaSuccess;
  size_t b = (size_t)net->batch;
  mlp_layout_init(&net->layout);
  net->owns_grads = net->grads == NULL;
  net->owns_loss = net->loss == NULL;
  net->params = NULL;
  net->inputs = NULL;
  net->labels = NULL;
  net->step = NULL;
  net->loss_history = NULL;
  for (int l = 0; l < MLP_LAYERS; l++) net->act[l] = net->delta[l] = NULL;

  if (net->owns_grads && (err = cudaMalloc((void **)&net->grads, net->layout.total * sizeof(float))) != cudaSuccess)
    goto out;
  if (net->owns_loss && (err = cudaMalloc((void **)&net->loss, sizeof(float))) != cudaSuccess) goto out;
  if ((err = cudaMalloc((void **)&net->params, net->layout.total * sizeof(float))) != cudaSuccess) goto out;
  if ((err = cudaMalloc((void **)&net->inputs, b * MLP_INPUTS * sizeof(float))) != cudaSuccess) goto out;
  if ((err = cudaMalloc((void **)&net->labels, b * sizeof(int))) != cudaSuccess) goto out;
  for (int l = 0; l < MLP_LAYERS; l++) {
    size_t bytes = b * (size_t)mlp_fan_out(l) * sizeof(float);
    if ((err = cudaMalloc((void **)&net->act[l], bytes)) != cudaSuccess) goto out;
    if ((err = cudaMalloc((void **)&net->delta[l], bytes)) != cudaSuccess) goto out;
  }
  if ((err = cudaMalloc((void **)&net->step, sizeof *net->step)) != cudaSuccess) goto out;
  err = cudaMalloc((void **)&net->loss_history, (size_t)(net->history_len > 0 ? net->history_len : 1) * sizeof(float));
out:
  if (err != cudaSuccess) mlp_net_free(net);
  return err;
}

void mlp_net_free(mlp_net_t *net) {
  if (net->owns_grads) cudaFree(net->grads);
  if (net->owns_loss) cudaFree(net->loss);
  cudaFree(net->params);
  cudaFree(net->inputs);
  cudaFree(net->labels);
  for (int l = 0; l < MLP_LAYERS; l++) {
    cudaFree(net->act[l]);
    cudaFree(net->delta[l]);
  }
  cudaFree(net->step);
  cudaFree(net->loss_history);
  net->params = net->inputs = net->loss_history = NULL;
  net->labels = NULL;
  net->step = NULL;
  if (net->owns_grads) net->grads = NULL;
  if (net->owns_loss) net->loss = NULL;
  net->owns_grads = net->owns_loss = 0;
  for (int l = 0; l < MLP_LAYERS; l++) net->act[l] = net->delta[l] = NULL;
}

cudaError_t mlp_reset(const mlp_net_t *net, unsigned long long seed, cudaStream_t stream) {
  const mlp_layout_t *lay = &net->layout;
  for (int l = 0; l < MLP_LAYERS; l++) {
    size_t count = (size_t)mlp_fan_in(l) * (size_t)mlp_fan_out(l);
    /* He-uniform keeps the ReLU layers' activations at one scale; the output
     * layer starts small, so the first loss is close to log(classes) */
    float scale = l == MLP_LAYERS - 1 ? 1.0f / sqrtf((float)mlp_fan_in(l)) : sqrtf(6.0f / (float)mlp_fan_in(l));
    init_uniform_kernel<<<blocks_for(count), THREADS, 0, stream>>>(net->params + lay->weights[l], count, scale,
                                                                   seed + (unsigned long long)l);
    fill_kernel<<<blocks_for((size_t)mlp_fan_out(l)), THREADS, 0, stream>>>(net->params + lay->bias[l],
                                                                           (size_t)mlp_fan_out(l), 0.0f);
  }
  fill_kernel<<<blocks_for((size_t)net->history_len), THREADS, 0, stream>>>(net->loss_history,
                                                                            (size_t)net->history_len, nanf(""));
  set_step_kernel<<<1, 1, 0, stream>>>(net->step, 0ull);
  return cudaGetLastError();
}

cudaError_t mlp_make_batch(const mlp_net_t *net, cudaStream_t stream) {
  make_batch_kernel<<<(unsigned)net->batch, THREADS, 0, stream>>>(net->inputs, net->labels, net->first_sample,
                                                                  net->global_batch, net->step);
  return cudaGetLastError();
}

cudaError_t mlp_forward(const mlp_net_t *net, cudaStream_t stream) {
  cudaError_t err = cudaSuccess;
  const float *in = net->inputs;
  for (int l = 0; l < MLP_LAYERS; l++) {
    const float *w = net->params + net->layout.weights[l], *bias = net->params + net->layout.bias[l];
    int relu = l < MLP_LAYERS - 1;
    err = matmul(in, 0, w, 0, net->act[l], net->batch, mlp_fan_out(l), mlp_fan_in(l), bias, relu, NULL, stream);
    if (err != cudaSuccess) return err;
    in = net->act[l];
  }
  softmax_loss_kernel<<<1, THREADS, 0, stream>>>(net->act[MLP_LAYERS - 1], net->labels, net->batch,
                                                 net->delta[MLP_LAYERS - 1], net->loss);
  return cudaGetLastError();
}

cudaError_t mlp_backward(const mlp_net_t *net, int layer, cudaStream_t stream) {
  if (layer < 0 || layer >= MLP_LAYERS) return cudaErrorInvalidValue;
  int fan_in = mlp_fan_in(layer), fan_out = mlp_fan_out(layer);
  const float *in = layer == 0 ? net->inputs : net->act[layer - 1];
  const float *delta = net->delta[layer];
  float *grad_w = net->grads + net->layout.weights[layer], *grad_b = net->grads + net->layout.bias[layer];
  /* dW = in^T x delta: the sum over this replica's samples of the per-sample
   * gradients, each already divided by the batch size */
  cudaError_t err = matmul(in, 1, delta, 0, grad_w, fan_in, fan_out, net->batch, NULL, 0, NULL, stream);
  if (err != cudaSuccess) return err;
  column_sums_kernel<<<(unsigned)((fan_out + THREADS - 1) / THREADS), THREADS, 0, stream>>>(delta, net->batch,
                                                                                          fan_out, grad_b);
  if ((err = cudaGetLastError()) != cudaSuccess || layer == 0) return err;
  /* delta of the layer below: through the weights, then the ReLU, whose
   * derivative is 1 exactly where its output is positive */
  const float *w = net->params + net->layout.weights[layer];
  return matmul(delta, 0, w, 1, net->delta[layer - 1], net->batch, fan_in, fan_out, NULL, 0, net->act[layer - 1],
                stream);
}

cudaError_t mlp_sgd(const mlp_net_t *net, float learning_rate, cudaStream_t stream) {
  sgd_kernel<<<blocks_for(net->layout.total), THREADS, 0, stream>>>(net->params, net->grads, net->layout.total,
                                                                    learning_rate);
  return cudaGetLastError();
}

cudaError_t mlp_finish_step(const mlp_net_t *net, cudaStream_t stream) {
  finish_step_kernel<<<1, 1, 0, stream>>>(net->loss_history, net->history_len, net->loss, net->step);
  return cudaGetLastError();
}
