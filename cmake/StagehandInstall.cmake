# `cmake --install`: the public headers, every module library, the umbrella and testing targets, the
# `stagehand` binary (installed by apps/stagehand) and a CMake package, so that an application can
# `find_package(stagehand REQUIRED)` and link `stagehand::stagehand`.
# The module libraries add themselves to the export set `stagehandTargets` in stagehand_module().

include(CMakePackageConfigHelpers)

set(STAGEHAND_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/stagehand")

install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/stagehand"
        DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}"
        FILES_MATCHING PATTERN "*.h")

install(EXPORT stagehandTargets
        NAMESPACE stagehand::
        FILE stagehandTargets.cmake
        DESTINATION "${STAGEHAND_INSTALL_CMAKEDIR}")

configure_package_config_file("${CMAKE_CURRENT_LIST_DIR}/stagehandConfig.cmake.in"
                              "${PROJECT_BINARY_DIR}/stagehandConfig.cmake"
                              INSTALL_DESTINATION "${STAGEHAND_INSTALL_CMAKEDIR}")
# Before 1.0 a minor release may break the API, so only the same major.minor is compatible.
write_basic_package_version_file("${PROJECT_BINARY_DIR}/stagehandConfigVersion.cmake"
                                 VERSION "${PROJECT_VERSION}"
                                 COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/stagehandConfig.cmake"
              "${PROJECT_BINARY_DIR}/stagehandConfigVersion.cmake"
        DESTINATION "${STAGEHAND_INSTALL_CMAKEDIR}")
