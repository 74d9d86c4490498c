// runtime.h: what a generated module includes first, before its task kernels:
// the C ABI, the host/device macros, the atomics, the TaskView kernels take, and the
// request manager. The executor and the entry points come last, through entry.h.
#pragma once
#include "abi.h"
#include "platform.h"
#include "atomics.h"
#include "task_view.h"
#include "meta.h"
