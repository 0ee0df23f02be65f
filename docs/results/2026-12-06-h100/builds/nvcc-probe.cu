#include <torch/types.h>
#include <cuda.h>
#include <cuda_runtime.h>

#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void fused_ops_kernel(const float* x, float* out, int size, float subtract_value, float multiply_value) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < size) {
        float temp = x[idx] - subtract_value;
        out[idx] = max(0.0f, temp * multiply_value);
    }
}

torch::Tensor fused_ops_cuda(torch::Tensor x, float subtract_value, float multiply_value) {
    auto size = x.numel();
    auto out = torch::zeros_like(x);

    const int block_size = 256;
    const int num_blocks = (size + block_size - 1) / block_size;

    fused_ops_kernel<<<num_blocks, block_size>>>(x.data_ptr<float>(), out.data_ptr<float>(), size, subtract_value, multiply_value);

    return out;
}
