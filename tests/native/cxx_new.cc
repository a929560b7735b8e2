// C++ allocations only, each kind of operator new and delete: under a preloaded allocator
// that defines its own operators (jemalloc, tcmalloc), the shim must still see them all.
#include <new>
#include <unistd.h>

struct alignas(64) Wide {
    char c[64];
};
void *volatile sink; // keeps the compiler from eliding a new/delete pair

int main()
{
    usleep(300000); // the shim's writer arms before the first call
    for (int i = 0; i < 1000; i++) {
        char *a = new char[1000];
        sink = a;
        int *b = new int(i);
        sink = b;
        Wide *w = new Wide;
        sink = w;
        char *n = new (std::nothrow) char[10];
        sink = n;
        delete[] a;
        delete b;
        delete w;
        delete[] n;
    }
    return 0;
}
