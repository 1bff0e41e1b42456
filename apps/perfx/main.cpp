#include <cstdio>
int main() { std::puts("perfx: not implemented yet"); return 1; }
