// The precompiled test headers need a target of their own to be built in
// (tests/CMakeLists.txt); this file gives it its one source.
