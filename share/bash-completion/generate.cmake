# Writes the bash completion of mbkit (cmake -P, from tools/CMakeLists.txt): the engine
# (mbkit.bash), each tool's own table (TOOL --completion-spec), and the `complete` lines. One
# copy per command, so that bash-completion's loader, which looks for a file named after the
# command being completed, finds it whichever is completed first.
#   -DENGINE=mbkit.bash -DBIN_DIR=build/bin -DTOOLS=mb,mb-dataset,... -DOUTPUT_DIR=dir
string(REPLACE "," ";" tools "${TOOLS}")
file(READ "${ENGINE}" text)
set(names "")
foreach(tool IN LISTS tools)
  execute_process(COMMAND "${BIN_DIR}/${tool}" --completion-spec
                  OUTPUT_VARIABLE spec RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${BIN_DIR}/${tool} --completion-spec failed (${rc}): ${err}")
  endif()
  string(APPEND text "\n${spec}")
  if(tool MATCHES "^mb-(.+)$")
    list(APPEND names "${CMAKE_MATCH_1}")
  endif()
endforeach()
list(JOIN names " " joined)
list(JOIN tools " " commands)
string(APPEND text "\n_mbkit_tools='${joined}'\n_mbkit_subs[mb]='${joined} help'\n"
       "complete -F _mbkit_complete ${commands}\n")
file(MAKE_DIRECTORY "${OUTPUT_DIR}")
foreach(tool IN LISTS tools)
  file(WRITE "${OUTPUT_DIR}/${tool}.tmp" "${text}")
  file(RENAME "${OUTPUT_DIR}/${tool}.tmp" "${OUTPUT_DIR}/${tool}")
endforeach()
