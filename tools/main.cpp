// TEMPORARY: replaced by the CLI.
#include <cstdio>
int main() { std::puts("dsattn"); return 0; }
