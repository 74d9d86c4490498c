// runtime_object.h: the runtime's half of a CPU module, compiled alone (-c) once per flags and cached
// by mirage/mpk/build.py, then linked with the dispatcher's half (the generated source built with
// -DMPK_DISPATCHER_OBJECT, under which entry.h is empty and MPK_DISPATCH an external function). The
// entry points call the dispatcher through these declarations.
#pragma once
#include "runtime.h"
#include "ptx.h"   // the instructions' emulation: its slow paths are this object's (simt_cpu_config.h)
namespace mpk_generated {
bool execute_task(const mpk::TaskView& v);
void inject_fault(const mpk::TaskView& v, int32_t kind, int64_t element, double x);
}  // namespace mpk_generated
#define MPK_EXECUTE_TASK mpk_generated::execute_task
#define MPK_INJECT_FAULT mpk_generated::inject_fault
#include "entry.h"
