// vllm-cpu-builder: <torch/all.h> as vLLM's CPU kernels use it (`--torch-headers lean`).
//
// torch's own all.h also brings the C++ frontend for writing and training models (torch::nn,
// optim, data, jit, autograd, serialize, ...), which no vLLM kernel uses and which costs about
// 8 CPU-seconds in each unit that includes it (docs/benchmarks.md). vllm-libraries.cmake puts
// this folder first on the include path of every library of vLLM's top folder, so their units
// get only what vLLM's sources use: ATen and the torch:: names of types.h, TORCH_LIBRARY,
// utils.h (torch::set_num_threads, in vLLM's utils.cpp up to 0.16) and version.h (its macros,
// so a `#if TORCH_VERSION_...` sees what it would with torch's own). A unit that needs more
// fails to compile; `--torch-headers full` then builds with torch's own header.
#pragma once

#include <torch/library.h>
#include <torch/types.h>
#include <torch/utils.h>
#include <torch/version.h>
