# Sourced by kernel/build and kernel/check-series: the extracted source tree
# and the patch series.  Expects $repo and defines die().

TARBALL=${PMLAB_LINUX_TARBALL:-/usr/src/linux-source-6.1.tar.xz}
SERIES_DIR=${PMLAB_SERIES_DIR:-$repo/kernel/patches}

die() { echo "${0##*/}: $*" >&2; exit 1; }

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

# series_patches: the patch file names of the series, in order.
series_patches() {
	[ -r "$SERIES_DIR/series" ] || die "$SERIES_DIR/series missing"
	grep -v -e '^#' -e '^[[:space:]]*$' "$SERIES_DIR/series"
}

# series_hash: a short hash of the series file and every patch it names.
series_hash() {
	(cd "$SERIES_DIR" && series_patches | xargs cat series | sha256sum | cut -c1-16)
}

# ensure_tree: extract the tarball into $SRC once, as a git repository whose
# tag "pristine" is the tree as Debian ships it.
ensure_tree() {
	[ -r "$TARBALL" ] || die "$TARBALL missing: apt-get install $(basename "$TARBALL" .tar.xz) (or run lab/install-deps)"
	command -v git >/dev/null || die "git missing: apt-get install git"
	stamp=$(stat -c '%s-%Y' "$TARBALL")
	if git_src rev-parse -q --verify refs/tags/pristine >/dev/null 2>&1 &&
	   [ "$(cat "$(dirname "$SRC")/.tarball" 2>/dev/null)" = "$stamp" ]; then
		return 0
	fi
	echo "${0##*/}: extracting $TARBALL into $SRC" >&2
	rm -rf "$SRC" "$SRC.tmp" && mkdir -p "$SRC.tmp"
	tar -xJf "$TARBALL" -C "$SRC.tmp"
	mv "$SRC.tmp"/linux-source-* "$SRC" && rmdir "$SRC.tmp"
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
			die "patch $patch does not apply to $(basename "$TARBALL") (git's report above names the file)"
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
