# Sourced by the ensure-* scripts: as_root runs a command as root, through sudo when the script
# is not root, and stops the script with a clear message when it cannot.
as_root() {
	if [[ $(id -u) -eq 0 ]]; then
		"$@"
	elif command -v sudo >/dev/null 2>&1; then
		sudo "$@"
	else
		echo "$(basename "$0"): need root to run: $* (install sudo or run as root)" >&2
		exit 1
	fi
}
