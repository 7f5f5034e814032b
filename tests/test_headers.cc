// The translation unit that compiles the test binaries' shared precompiled header (GoogleTest and
// GoogleMock; see stagehand_test in cmake/StagehandTargets.cmake). It holds nothing else.
