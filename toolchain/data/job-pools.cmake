# vllm-cpu-builder: light units many at a time, heavy units few at a time, never together.
#
# Passed by the plan as -DCMAKE_PROJECT_INCLUDE=<this file> -DVCB_LIGHT_JOBS=n
# -DVCB_HEAVY_JOBS=m -DVCB_LIGHT_TARGETS=name,... (a recipe's measured [[compile_memory]]; '*'
# matches any characters). CMake includes it after every project() call; it acts at the first,
# the top project. At the end of the top folder, when every target exists, each compiled target's
# units and link go into the Ninja pool vcb_light or vcb_heavy (every unlisted target is heavy),
# and the heavy targets wait for the light ones: the plan's peak is the larger of
# "light jobs x light peak" and "heavy jobs x heavy peak", never their sum.
include_guard(GLOBAL)
include("${CMAKE_CURRENT_LIST_DIR}/targets-below.cmake")

set_property(GLOBAL APPEND PROPERTY JOB_POOLS
             vcb_light=${VCB_LIGHT_JOBS} vcb_heavy=${VCB_HEAVY_JOBS})

function(_vcb_compiled targets out)
  set(compiled)
  foreach(target IN LISTS targets)
    get_target_property(type ${target} TYPE)
    if(type MATCHES "^(STATIC_LIBRARY|SHARED_LIBRARY|MODULE_LIBRARY|OBJECT_LIBRARY|EXECUTABLE)$")
      list(APPEND compiled ${target})
    endif()
  endforeach()
  set(${out} ${compiled} PARENT_SCOPE)
endfunction()

function(_vcb_listed_light target out)
  string(REPLACE "," ";" patterns "${VCB_LIGHT_TARGETS}")
  foreach(pattern IN LISTS patterns)
    string(REGEX REPLACE "([.+])" "\\\\\\1" regex "${pattern}")
    string(REPLACE "*" ".*" regex "${regex}")
    if(target MATCHES "^${regex}$")
      set(${out} TRUE PARENT_SCOPE)
      return()
    endif()
  endforeach()
  set(${out} FALSE PARENT_SCOPE)
endfunction()

# A light target that needs a heavy one is heavy too: it could not be built before the heavy
# ones, and the wait would be a dependency cycle.
function(_vcb_needs_any target others out)
  get_target_property(links ${target} LINK_LIBRARIES)
  get_target_property(added ${target} MANUALLY_ADDED_DEPENDENCIES)
  foreach(dependency IN LISTS links added)
    string(REGEX REPLACE "^\\$<[A-Z_]+:(.*)>$" "\\1" dependency "${dependency}")
    if(dependency IN_LIST others)
      set(${out} TRUE PARENT_SCOPE)
      return()
    endif()
  endforeach()
  set(${out} FALSE PARENT_SCOPE)
endfunction()

function(_vcb_assign_pools)
  _vcb_targets_below("${CMAKE_SOURCE_DIR}" every)
  _vcb_compiled("${every}" compiled)
  set(light)
  set(heavy)
  foreach(target IN LISTS compiled)
    _vcb_listed_light(${target} listed)
    if(listed)
      list(APPEND light ${target})
    else()
      list(APPEND heavy ${target})
    endif()
  endforeach()
  set(moved TRUE)
  while(moved)
    set(moved FALSE)
    foreach(target IN LISTS light)
      _vcb_needs_any(${target} "${heavy}" needs)
      if(needs)
        list(REMOVE_ITEM light ${target})
        list(APPEND heavy ${target})
        set(moved TRUE)
      endif()
    endforeach()
  endwhile()
  foreach(pool IN ITEMS light heavy)
    foreach(target IN LISTS ${pool})
      set_property(TARGET ${target} PROPERTY JOB_POOL_COMPILE vcb_${pool})
      set_property(TARGET ${target} PROPERTY JOB_POOL_LINK vcb_${pool})
    endforeach()
  endforeach()
  if(light AND heavy)
    add_custom_target(vcb_light_units)
    add_dependencies(vcb_light_units ${light})
    foreach(target IN LISTS heavy)
      add_dependencies(${target} vcb_light_units)
    endforeach()
  endif()
  list(LENGTH light light_count)
  list(LENGTH heavy heavy_count)
  message(STATUS "vllm-cpu-builder: ${light_count} light targets ${VCB_LIGHT_JOBS} at a time, "
                 "then ${heavy_count} heavy targets ${VCB_HEAVY_JOBS} at a time: ${heavy}")
endfunction()

cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _vcb_assign_pools)
