# Sourced by kernel/build and kernel/check-series: the extracted source tree
# and the patch series.  Expects $repo and defines die().

TARBALL=${PMLAB_LINUX_TARBALL:-/usr/src/linux-source-6.1.tar.xz}
SERIES_DIR=${PMLAB_SERIES_DIR:-$repo/kernel/patches/6.1}

die() { echo "${0##*/}: $*" >&2; exit 1; }

# tree_name: what the series applies to, for messages and the manifest.
tree_name() {
	if [ -n "${SOURCE_GIT:-}" ]; then
		echo "$(basename "$SOURCE_GIT")@$(printf %.12s "$SOURCE_COMMIT")"
	else
		basename "$TARBALL"
	fi
}

# build_lock: one kernel build at a time on this machine (2 cores); a second
# one waits here instead of halving the speed of both.
build_lock() {
	exec 9>"${PMLAB_BUILD_LOCK:-/tmp/pmlab-kernel-build.lock}"
	if ! flock -n 9; then
		echo "${0##*/}: waiting for another kernel build to finish" >&2
		flock 9
	fi
}

git_src() { git -C "$SRC" -c user.name=pmlab -c user.email=pmlab@localhost "$@"; }

# series_patches: the patch file names of the series, in order (none when
# SERIES_DIR is empty: --series none).
series_patches() {
	[ -n "$SERIES_DIR" ] || return 0
	[ -r "$SERIES_DIR/series" ] || die "$SERIES_DIR/series missing"
	grep -v -e '^#' -e '^[[:space:]]*$' "$SERIES_DIR/series"
}

# series_hash: a short hash of the series file and every patch it names.
series_hash() {
	[ -n "$SERIES_DIR" ] || { echo none; return 0; }
	(cd "$SERIES_DIR" && series_patches | xargs cat series | sha256sum | cut -c1-16)
}

# ensure_tree: make $SRC the source tree as a git repository whose tag
# "pristine" is the tree as shipped: $TARBALL (Debian's linux-source or a
# user's tarball, one top directory) extracted once, or commit
# $SOURCE_COMMIT of the git tree $SOURCE_GIT, cloned (--shared) once and
# moved between commits by checkout, so that a bisection builds
# incrementally (lab/kernels.py resolves --kernel SPEC into these).
ensure_tree() {
	command -v git >/dev/null || die "git missing: apt-get install git"
	if [ -n "${SOURCE_GIT:-}" ]; then
		stamp="git $SOURCE_GIT"
		if [ "$(cat "$(dirname "$SRC")/.tarball" 2>/dev/null)" != "$stamp" ]; then
			echo "${0##*/}: cloning $SOURCE_GIT into $SRC" >&2
			rm -rf "$SRC"
			git clone -q --shared "$SOURCE_GIT" "$SRC" || die "git clone of $SOURCE_GIT failed"
			echo "$stamp" >"$(dirname "$SRC")/.tarball"
		fi
		git_src cat-file -e "$SOURCE_COMMIT^{commit}" 2>/dev/null ||
			git_src fetch -q "$SOURCE_GIT" "$SOURCE_COMMIT" || die "commit $SOURCE_COMMIT not found in $SOURCE_GIT"
		git_src tag -f pristine "$SOURCE_COMMIT" >/dev/null
		return 0
	fi
	[ -r "$TARBALL" ] || die "$TARBALL missing: apt-get install $(basename "$TARBALL" .tar.xz) (./pmlab build installs every package pmlab needs)"
	stamp=$(stat -c '%s-%Y' "$TARBALL")
	if git_src rev-parse -q --verify refs/tags/pristine >/dev/null 2>&1 &&
	   [ "$(cat "$(dirname "$SRC")/.tarball" 2>/dev/null)" = "$stamp" ]; then
		return 0
	fi
	echo "${0##*/}: extracting $TARBALL into $SRC" >&2
	rm -rf "$SRC" "$SRC.tmp" && mkdir -p "$SRC.tmp"
	tar -xf "$TARBALL" -C "$SRC.tmp" || die "$TARBALL: tar could not extract it"
	set -- "$SRC.tmp"/*
	[ $# -eq 1 ] && [ -d "$1" ] && [ -f "$1/Makefile" ] ||
		die "$TARBALL: expected one top directory holding a kernel Makefile"
	mv "$1" "$SRC" && rmdir "$SRC.tmp"
	git_src init -q
	# Debian's .gitignore ignores the whole top level: add everything forcibly.
	git_src add -f -A . >/dev/null
	git_src commit -q -m "$(basename "$TARBALL") as extracted"
	git_src tag pristine
	echo "$stamp" >"$(dirname "$SRC")/.tarball"
}

# checkout_series N: make $SRC the pristine tree plus the first N patches of
# the series (all of them if N is "all", none if 0).  The patches are applied
# to a scratch index and the result checked out, so git rewrites only files
# whose content changes and make stays incremental.  A patch that does not
# apply stops everything with its name and git's message naming the file.
checkout_series() {
	index=$(mktemp)
	GIT_INDEX_FILE=$index git_src read-tree pristine
	n=0
	for patch in $(series_patches); do
		[ "$1" = all ] || [ "$n" -lt "$1" ] || break
		n=$((n + 1))
		[ -r "$SERIES_DIR/$patch" ] || { rm -f "$index"; die "series names $patch, which is not in $SERIES_DIR"; }
		if ! out=$(GIT_INDEX_FILE=$index git_src apply --cached "$SERIES_DIR/$patch" 2>&1); then
			rm -f "$index"
			echo "$out" | sed 's/^/  /' >&2
			die "patch $patch does not apply to $(tree_name) (git's report above names the file)"
		fi
	done
	tree=$(GIT_INDEX_FILE=$index git_src write-tree)
	rm -f "$index"
	if [ "$(git_src rev-parse 'HEAD^{tree}')" != "$tree" ]; then
		commit=$(git_src commit-tree "$tree" -p pristine -m "pristine + $n patches")
		git_src reset -q --hard
		git_src checkout -q "$commit"
	fi
}
