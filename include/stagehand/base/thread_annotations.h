// Clang's thread-safety annotations, so that the compiler checks which mutex guards which member
// (https://clang.llvm.org/docs/ThreadSafetyAnalysis.html). Under clang they expand to the
// attributes, which `-Wthread-safety` (the `check_thread_safety` lint test) checks; under GCC,
// which builds the product, they expand to nothing. Use them with stagehand::Mutex (mutex.h).
#pragma once

#if defined(__clang__)
#define STAGEHAND_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define STAGEHAND_THREAD_ANNOTATION(x)
#endif

// On a class: its objects are a capability (a lock) named `x` in diagnostics.
#define STAGEHAND_CAPABILITY(x) STAGEHAND_THREAD_ANNOTATION(capability(x))
// On a class: an RAII object that holds a capability for its lifetime.
#define STAGEHAND_SCOPED_CAPABILITY STAGEHAND_THREAD_ANNOTATION(scoped_lockable)
// On a data member: it is read and written only with `x` held.
#define STAGEHAND_GUARDED_BY(x) STAGEHAND_THREAD_ANNOTATION(guarded_by(x))
// On a pointer member: what it points to is read and written only with `x` held.
#define STAGEHAND_PT_GUARDED_BY(x) STAGEHAND_THREAD_ANNOTATION(pt_guarded_by(x))
// On a function (or lambda): callers must hold the capabilities.
#define STAGEHAND_REQUIRES(...) STAGEHAND_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
// On a function: callers must not hold the capabilities (the function takes them itself).
#define STAGEHAND_EXCLUDES(...) STAGEHAND_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
// On a function: it acquires the capabilities (or, without arguments, `this`) and keeps them.
#define STAGEHAND_ACQUIRE(...) STAGEHAND_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
// On a function: it releases capabilities the caller held (or, without arguments, `this`).
#define STAGEHAND_RELEASE(...) STAGEHAND_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
// On a function: the analysis does not look into its body. Each use says why.
#define STAGEHAND_NO_THREAD_SAFETY_ANALYSIS STAGEHAND_THREAD_ANNOTATION(no_thread_safety_analysis)
