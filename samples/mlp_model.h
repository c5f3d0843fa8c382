/* The model of the data-parallel training sample (mlp_train.cu): a small
 * multilayer perceptron, 256 inputs -> 1024 -> 1024 -> 16 classes with ReLU
 * after the two hidden layers, softmax cross-entropy and plain SGD. Its
 * kernels (mlp_model.cu) are plain CUDA C: tiled matrix products, no cuBLAS.
 *
 * A replica (mlp_net_t) trains on `batch` samples per step: samples
 * [first_sample, first_sample + batch) of each global batch of global_batch
 * samples. The data is synthetic and made on the GPU: the inputs of global
 * sample g in step k are a hash of (k * global_batch + g, feature), the label is
 * the class a fixed random linear "teacher" scores highest, so the model has
 * something to learn and the loss falls. The step counter lives in device
 * memory, so captured work reads the current step on every replay.
 *
 * Every function enqueues kernels on `stream` and returns the launch error. None
 * synchronizes or allocates, so they can all be captured into CUDA graphs.
 * Results are deterministic: each output element is summed by one thread in a
 * fixed order. */
#ifndef MLP_MODEL_H
#define MLP_MODEL_H

#include <stddef.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { MLP_INPUTS = 256, MLP_HIDDEN = 1024, MLP_CLASSES = 16, MLP_LAYERS = 3 };

/* Layer l maps fan_in(l) features to fan_out(l): 0 is inputs -> hidden, 1 is
 * hidden -> hidden, 2 is hidden -> classes. */
int mlp_fan_in(int layer);
int mlp_fan_out(int layer);

/* Where each tensor lives in a block of floats, as offsets in floats.
 * Parameters and gradients share this layout, ordered as the backward pass
 * produces the gradients: last layer first, each layer's weights before its
 * bias. That is also the order in which the sample records their allreduces,
 * so gradients allocated in that order from one arena are one contiguous run
 * that fusion reduces without copies. Every tensor is a multiple of 16 floats
 * long, so every one starts 64-byte aligned when the block does. */
typedef struct mlp_layout {
  size_t weights[MLP_LAYERS]; /* layer l's weights: fan_in x fan_out, row-major */
  size_t bias[MLP_LAYERS];    /* layer l's bias: fan_out */
  size_t total;               /* floats in the block */
} mlp_layout_t;

void mlp_layout_init(mlp_layout_t *layout);

/* One replica's device memory. The caller fills in batch, first_sample,
 * global_batch and history_len and may point grads and loss at memory of its
 * own (an arena); mlp_net_alloc allocates the rest. */
typedef struct mlp_net {
  int batch;        /* samples this replica trains on per step */
  int first_sample; /* its first sample within each global batch */
  int global_batch; /* samples per step over all replicas */
  int history_len;  /* steps whose loss is kept */
  mlp_layout_t layout;
  float *params; /* layout.total floats */
  float *grads;  /* layout.total floats: d loss / d params, mean over this replica's batch */
  float *loss;   /* 1 float: mean loss over this replica's batch */
  float *inputs; /* batch x MLP_INPUTS */
  int *labels;   /* batch */
  float *act[MLP_LAYERS];   /* layer l's output: ReLU'd hidden features for l < 2, logits for l = 2 */
  float *delta[MLP_LAYERS]; /* d loss / d (layer l's output before its ReLU) */
  unsigned long long *step; /* the step this replica trains next */
  float *loss_history;      /* history_len floats: the loss of step k, as *loss held it after the step */
  int owns_grads, owns_loss;
} mlp_net_t;

/* Allocates what the caller left NULL (grads, loss) and everything else.
 * On failure frees what it allocated and returns the error. */
cudaError_t mlp_net_alloc(mlp_net_t *net);
void mlp_net_free(mlp_net_t *net);

/* Parameters from `seed` (the same on every replica given the same seed:
 * He-uniform weights, a smaller last layer, zero biases), step counter 0, loss
 * history NaN. */
cudaError_t mlp_reset(const mlp_net_t *net, unsigned long long seed, cudaStream_t stream);

/* The inputs and labels of this replica's samples in the current step. */
cudaError_t mlp_make_batch(const mlp_net_t *net, cudaStream_t stream);

/* Forward pass and loss: act[*], then loss and delta[2] (the gradient of the
 * mean loss with respect to the logits). Reads inputs, labels and params. */
cudaError_t mlp_forward(const mlp_net_t *net, cudaStream_t stream);

/* Backward through layer l (run for l = 2, 1, 0 in that order): layer l's
 * weight and bias gradients, and for l > 0 delta[l - 1]. Reads delta[l], the
 * layer's input (act[l - 1], or inputs for l = 0) and, for l > 0, its weights. */
cudaError_t mlp_backward(const mlp_net_t *net, int layer, cudaStream_t stream);

/* params -= learning_rate * grads, over the whole block. */
cudaError_t mlp_sgd(const mlp_net_t *net, float learning_rate, cudaStream_t stream);

/* loss_history[step] = *loss (while step < history_len), then step += 1. */
cudaError_t mlp_finish_step(const mlp_net_t *net, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
