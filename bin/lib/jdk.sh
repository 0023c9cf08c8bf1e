# shellcheck shell=bash
# Sourced by bin/jnbd and bin/test: finds a JDK >= $JNBD_MIN_JAVA (25).
#
#   jnbd_find_jdk    prints the JDK's home on stdout and returns 0,
#                    or prints one line saying what to install on stderr and returns 1.
#
# Order: $JAVA_HOME when its java is new enough, else the newest /usr/lib/jvm/* that is.

JNBD_MIN_JAVA=${JNBD_MIN_JAVA:-25}

# The feature release of a java binary ("25" for 25.0.3, "8" for 1.8.0_412), or nothing. A JDK's release
# file says it without starting a JVM, which costs 0.1 s a JDK (and bin/jnbd looks before every command);
# only a java with no release file beside it is asked.
jnbd_java_major() {
  local java=$1 line version="" release
  [ -x "$java" ] || return 1
  release=${java%/*/*}/release
  if [ -f "$release" ]; then
    while IFS= read -r line; do
      case $line in
        JAVA_VERSION=\"?*\"*) version=${line#JAVA_VERSION=\"}; break ;;
      esac
    done <"$release"
  fi
  if [ -z "$version" ]; then
    line=$("$java" -version 2>&1 | grep -m1 -E 'version "[^"]+"') || return 1
    version=${line#*version \"}
  fi
  version=${version%%\"*}
  case $version in
    1.*) version=${version#1.} ;;
  esac
  version=${version%%[!0-9]*}
  [ -n "$version" ] || return 1
  printf '%s\n' "$version"
}

jnbd_find_jdk() {
  local home major best="" best_major=0
  if [ -n "${JAVA_HOME:-}" ]; then
    major=$(jnbd_java_major "$JAVA_HOME/bin/java") || major=0
    if [ "$major" -ge "$JNBD_MIN_JAVA" ]; then
      printf '%s\n' "$JAVA_HOME"
      return 0
    fi
  fi
  for home in /usr/lib/jvm/*; do
    [ -d "$home" ] || continue
    # Debian keeps several symlinks to the same JDK; any of them will do.
    major=$(jnbd_java_major "$home/bin/java") || continue
    if [ "$major" -ge "$JNBD_MIN_JAVA" ] && [ "$major" -gt "$best_major" ]; then
      best=$home
      best_major=$major
    fi
  done
  if [ -n "$best" ]; then
    printf '%s\n' "$best"
    return 0
  fi
  echo "jnbd: needs a JDK $JNBD_MIN_JAVA or newer: install one (e.g. apt-get install temurin-${JNBD_MIN_JAVA}-jdk) or set JAVA_HOME to it" >&2
  return 1
}
