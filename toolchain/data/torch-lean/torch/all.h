// vllm-cpu-builder: <torch/all.h> as vLLM's CPU kernels use it (`--torch-headers lean`).
//
// torch's own all.h also brings the C++ frontend for writing and training models (torch::nn,
// optim, data, jit, autograd, serialize, ...), which no vLLM kernel uses and which costs about
// 9 CPU-seconds in each unit that includes it (docs/benchmarks.md). kernel-headers.cmake puts
// this folder first on the include path of vLLM's own libraries, so their units get only what
// they use: ATen and the torch:: names of types.h, TORCH_LIBRARY, and utils.h
// (torch::set_num_threads, in vLLM's utils.cpp up to 0.16). A unit that needs more fails to
// compile; `--torch-headers full` then builds with torch's own header.
#pragma once

#include <torch/library.h>
#include <torch/types.h>
#include <torch/utils.h>
