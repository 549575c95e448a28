# Bash completion for mbkit's tools and for mb. This part is the engine; the build appends each
# tool's own table (TOOL --completion-spec: subcommands, options, which take a value,
# positionals, and the words or files each value can be) and the `complete` lines, so the
# completion follows the options as they are built. See tools/CMakeLists.txt.

declare -gA _mbkit_subs _mbkit_opts _mbkit_takes _mbkit_pos _mbkit_words _mbkit_files _mbkit_lists
declare -g _mbkit_tools=

# _mbkit_is WORD LIST...: whether WORD is one of LIST.
_mbkit_is() {
  local word=$1 item
  shift
  for item; do [[ $item == "$word" ]] && return 0; done
  return 1
}

# _mbkit_files_like EXTENSIONS CUR: directories, and files with one of EXTENSIONS ("h5"; "*": any
# file; "/": directories only).
_mbkit_files_like() {
  local extensions=$1 cur=$2 extension
  local IFS=$'\n'
  compopt -o filenames 2>/dev/null
  if [[ " $extensions " == *" * "* ]]; then
    COMPREPLY+=($(compgen -f -- "$cur"))
    return
  fi
  COMPREPLY+=($(compgen -d -- "$cur"))
  for extension in ${extensions// /$'\n'}; do
    [[ $extension == / ]] && continue
    COMPREPLY+=($(compgen -f -X "!*.$extension" -- "$cur"))
  done
}

# _mbkit_values KEY CUR: the words and files that "COMMAND NAME" takes.
_mbkit_values() {
  local key=$1 cur=$2
  if [[ -n ${_mbkit_lists[$key]} && $cur == *,* ]]; then
    # A comma-separated list: complete its last item, keeping those before.
    compopt -o nospace 2>/dev/null
    COMPREPLY+=($(compgen -P "${cur%,*}," -W "${_mbkit_words[$key]}" -- "${cur##*,}"))
    return 0
  fi
  [[ -n ${_mbkit_words[$key]} ]] && COMPREPLY+=($(compgen -W "${_mbkit_words[$key]}" -- "$cur"))
  [[ -n ${_mbkit_files[$key]} ]] && _mbkit_files_like "${_mbkit_files[$key]}" "$cur"
  return 0
}

_mbkit_complete() {
  local -a words=("${COMP_WORDS[@]}")
  local cword=$COMP_CWORD
  local cur=${words[cword]} cmd=${words[0]##*/} i
  COMPREPLY=()
  if [[ $cmd == mb ]]; then
    # mb's own options come before the tool; from the tool on, the tool's completion applies.
    i=1
    while ((i < cword)) && [[ ${words[i]} == -* ]]; do ((i++)); done
    if ((i == cword)); then
      if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "${_mbkit_opts[mb]}" -- "$cur"))
      else
        COMPREPLY=($(compgen -W "${_mbkit_subs[mb]}" -- "$cur"))
      fi
      return 0
    fi
    if [[ ${words[i]} == help ]]; then
      ((cword == i + 1)) && COMPREPLY=($(compgen -W "$_mbkit_tools mb formats mbkit" -- "$cur"))
      return 0
    fi
    cmd=mb-${words[i]}
    words=("$cmd" "${words[@]:i+1}")
    ((cword -= i))
  fi
  [[ -n ${_mbkit_opts[$cmd]+set} ]] || return 0

  # Walk the words before the cursor: the subcommand, option values, positionals so far.
  local key=$cmd word value_of= positionals=0
  for ((i = 1; i < cword; i++)); do
    word=${words[i]}
    if [[ -n $value_of ]]; then
      # --model=mlp reaches us as --model, =, mlp (= breaks words): the value is after the =.
      [[ $word == = ]] || value_of=
    elif [[ $word == -* ]]; then
      [[ $word != *=* ]] && _mbkit_is "$word" ${_mbkit_takes[$key]} ${_mbkit_takes[$cmd]} &&
        value_of=$word
    elif [[ $key == "$cmd" ]] && _mbkit_is "$word" ${_mbkit_subs[$cmd]}; then
      key="$cmd $word"
    else
      ((positionals++))
    fi
  done

  if [[ -n $value_of ]]; then
    _mbkit_values "$key $value_of" "$cur"
    # Options of the tool itself are valid after its subcommand too.
    ((${#COMPREPLY[@]} == 0)) && [[ $key != "$cmd" ]] && _mbkit_values "$cmd $value_of" "$cur"
    return 0
  fi
  if [[ $cur == -* ]]; then
    local options=${_mbkit_opts[$key]}
    [[ $key != "$cmd" ]] && options+=" ${_mbkit_opts[$cmd]}"
    COMPREPLY=($(compgen -W "$options" -- "$cur"))
    return 0
  fi
  if [[ $key == "$cmd" && -n ${_mbkit_subs[$cmd]} ]]; then
    COMPREPLY=($(compgen -W "${_mbkit_subs[$cmd]}" -- "$cur"))
    return 0
  fi
  # The positional at the cursor; a last one named NAME... takes every word after it.
  local -a names=(${_mbkit_pos[$key]})
  local name=
  if ((positionals < ${#names[@]})); then
    name=${names[positionals]}
  elif ((${#names[@]} > 0)) && [[ ${names[-1]} == *... ]]; then
    name=${names[-1]}
  fi
  [[ -n $name ]] && _mbkit_values "$key ${name%...}" "$cur"
  return 0
}
