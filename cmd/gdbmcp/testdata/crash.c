#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* crash dereferences NULL when its input line starts with "boom". */
static int crash(const char *line) {
	int *p = NULL;
	if (strncmp(line, "boom", 4) == 0)
		return *p;
	return (int)strlen(line);
}

static int parse(const char *line) { return crash(line) + 1; }

int main(int argc, char **argv) {
	char buf[256] = "";
	printf("args: %d %s\n", argc, argc > 1 ? argv[1] : "-");
	fflush(stdout);
	if (fgets(buf, sizeof buf, stdin) == NULL)
		return 3;
	return parse(buf) > 100 ? 1 : 0;
}
